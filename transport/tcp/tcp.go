// Package tcp is the transport over TCP sockets, for ranks on different
// hosts without RDMA, and the reference every other transport is tested
// against.
//
// The mesh is eager and all-to-all: at Connect every rank listens on one
// port, publishes it through the rendezvous store, dials every lower rank and
// accepts every higher one, so that a job either starts fully connected or
// fails at start with a precise error instead of part-way through a
// collective. Each connection is authenticated with the job token (see
// internal/auth) and then carries frames in both directions: a 12-byte
// header (kind, slot, length, piggybacked credits) and the payload. One
// reader goroutine per peer reads each payload straight into the slot of a
// pre-allocated per-peer receive slab, so nothing is allocated or copied on
// the receive path besides the kernel's copy into the slot; sends go to the
// kernel with writev straight from the caller's buffer. Credits, the
// receiver's promise that a slot is free again, ride back on data frames
// going the other way, or in a frame of their own once half the slots wait
// to be reported.
package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/transport"
)

// Store is the part of the rendezvous client the mesh needs.
type Store interface {
	Put(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// Options tune the mesh. The zero value picks the defaults.
type Options struct {
	// Slots is the number of receive slots per peer (default 4, at least 2).
	Slots int
	// SlotSize is the bytes per slot, the largest message (default 512 KiB).
	SlotSize int
	// ListenHost is the address to listen on. Default: the local address
	// this process uses to reach the store, which is the one peers reach.
	ListenHost string
	// Namespace separates meshes built through the same store (one per
	// communicator); it prefixes the store keys and is checked at connect.
	Namespace string
	// HandshakeTimeout bounds a single connection's authentication.
	HandshakeTimeout time.Duration
	// CloseLinger bounds how long Close waits for peers to close their ends
	// in order, so that no data in flight is cut off by a reset.
	CloseLinger time.Duration
}

const (
	DefaultSlots    = 4
	DefaultSlotSize = 512 << 10
	// MaxSlotSize bounds what a peer may ask us to believe about lengths.
	MaxSlotSize = 64 << 20
	maxSlots    = 1 << 12

	frameData   = 1
	frameCredit = 2
	frameBye    = 3
	frameHdrLen = 12

	// smallSend is the payload size below which header and payload are
	// copied into one buffer and written with one write: cheaper than
	// writev's bookkeeping for tiny messages.
	smallSend = 4 << 10
)

var (
	errProtocol = errors.New("protocol violation")
)

func (o *Options) fill() error {
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.SlotSize == 0 {
		o.SlotSize = DefaultSlotSize
	}
	if o.Slots < 2 || o.Slots > maxSlots {
		return fmt.Errorf("tcp: %d slots per peer, want 2..%d", o.Slots, maxSlots)
	}
	if o.SlotSize < 4<<10 || o.SlotSize > MaxSlotSize || o.SlotSize%64 != 0 {
		return fmt.Errorf("tcp: slot size %d, want a multiple of 64 in [4 KiB, %d MiB]", o.SlotSize, MaxSlotSize>>20)
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.CloseLinger == 0 {
		o.CloseLinger = 2 * time.Second
	}
	return nil
}

// Transport is the TCP mesh of one rank. See package transport for the contract.
type Transport struct {
	rank, size int
	opts       Options
	peers      []*peer // nil at own rank
	closed     chan struct{}
	closeOnce  sync.Once
	readers    sync.WaitGroup
	refused    atomic.Int64
}

type peer struct {
	t    *Transport
	rank int
	conn *net.TCPConn

	// receive side, filled by the reader goroutine
	slab  []byte
	ready chan transport.Message

	// send side
	credits chan struct{} // one token per free slot at the peer
	sendSeq int           // only the one sending goroutine touches it
	pending atomic.Int32  // slots released here, not yet reported to the peer
	wmu     sync.Mutex    // one frame on the wire at a time
	wbuf    []byte        // header (+ small payload) scratch, under wmu
	writing bool          // a write is in progress, under dlMu
	dlMu    sync.Mutex

	failOnce sync.Once
	dead     chan struct{}
	err      error // set before dead is closed
	byeSeen  atomic.Bool
}

// Connect builds this rank's mesh to all size-1 peers.
func Connect(ctx context.Context, store Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("tcp: rank %d of size %d", rank, size)
	}
	t := &Transport{
		rank:   rank,
		size:   size,
		opts:   opts,
		peers:  make([]*peer, size),
		closed: make(chan struct{}),
	}
	if size == 1 {
		return t, nil
	}
	if err := t.connect(ctx, store, token); err != nil {
		t.Close()
		return nil, err
	}
	for _, p := range t.peers {
		if p != nil {
			t.readers.Add(1)
			go p.readLoop()
		}
	}
	logging.L().Debug("tcp mesh connected", "rank", rank, "size", size, "slots", opts.Slots, "slot_size", opts.SlotSize)
	return t, nil
}

// hello is what each end of a mesh connection says after authenticating.
type hello struct {
	rank, size, slots, slotSize uint32
	namespace                   uint64
}

const helloLen = 4 + 4*4 + 8

func (h hello) marshal() []byte {
	b := make([]byte, helloLen)
	copy(b, "MESH")
	binary.LittleEndian.PutUint32(b[4:], h.rank)
	binary.LittleEndian.PutUint32(b[8:], h.size)
	binary.LittleEndian.PutUint32(b[12:], h.slots)
	binary.LittleEndian.PutUint32(b[16:], h.slotSize)
	binary.LittleEndian.PutUint64(b[20:], h.namespace)
	return b
}

func parseHello(b []byte) (hello, error) {
	if len(b) != helloLen || string(b[:4]) != "MESH" {
		return hello{}, fmt.Errorf("bad mesh hello: %w", errProtocol)
	}
	return hello{
		rank:      binary.LittleEndian.Uint32(b[4:]),
		size:      binary.LittleEndian.Uint32(b[8:]),
		slots:     binary.LittleEndian.Uint32(b[12:]),
		slotSize:  binary.LittleEndian.Uint32(b[16:]),
		namespace: binary.LittleEndian.Uint64(b[20:]),
	}, nil
}

func (t *Transport) hello() hello {
	h := fnv.New64a()
	h.Write([]byte(t.opts.Namespace))
	return hello{uint32(t.rank), uint32(t.size), uint32(t.opts.Slots), uint32(t.opts.SlotSize), h.Sum64()}
}

// check validates a peer's hello against ours. want is the expected rank,
// or -1 when any higher rank may be calling.
func (t *Transport) check(h hello, want int) error {
	mine := t.hello()
	switch {
	case h.namespace != mine.namespace:
		return fmt.Errorf("peer belongs to another communicator: %w", errProtocol)
	case h.size != mine.size:
		return fmt.Errorf("peer says the job has %d ranks, this rank says %d", h.size, mine.size)
	case want >= 0 && int(h.rank) != want:
		return fmt.Errorf("expected rank %d, peer says it is rank %d", want, h.rank)
	case want < 0 && (int(h.rank) <= t.rank || int(h.rank) >= t.size):
		return fmt.Errorf("rank %d may not dial rank %d", h.rank, t.rank)
	case h.slots != mine.slots || h.slotSize != mine.slotSize:
		return fmt.Errorf("peer uses %d slots of %d bytes, this rank %d of %d (every rank must use the same transport options)",
			h.slots, h.slotSize, mine.slots, mine.slotSize)
	}
	return nil
}

func (t *Transport) key(r int) string {
	return t.opts.Namespace + "tcp/addr/" + strconv.Itoa(r)
}

func (t *Transport) connect(ctx context.Context, store Store, token []byte) error {
	host := t.opts.ListenHost
	if host == "" {
		if la, ok := store.(interface{ LocalAddr() net.Addr }); ok {
			if ta, ok := la.LocalAddr().(*net.TCPAddr); ok {
				host = ta.IP.String()
			}
		}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("tcp: listen on %s: %w", host, err)
	}
	defer ln.Close() // the door shuts once the mesh is built
	if err := store.Put(ctx, t.key(t.rank), []byte(ln.Addr().String())); err != nil {
		return fmt.Errorf("tcp: publish address: %w", err)
	}

	type result struct {
		p   *peer
		err error
	}
	results := make(chan result, t.size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup

	// Dial every lower rank.
	for r := 0; r < t.rank; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			p, err := t.dial(ctx, store, token, r)
			results <- result{p, err}
		}(r)
	}
	// Accept every higher rank; strangers are refused and do not count.
	if t.rank < t.size-1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.acceptLoop(ctx, ln, token, func(p *peer, err error) { results <- result{p, err} })
		}()
	}
	var firstErr error
	for got := 0; got < t.size-1; got++ {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			r.err = fmt.Errorf("tcp: building the mesh: %w", ctx.Err())
		}
		if r.err != nil {
			firstErr = r.err
			break
		}
		t.peers[r.p.rank] = r.p
	}
	cancel()
	ln.Close()
	wg.Wait()
	// Late arrivals after a failure still need closing.
	close(results)
	for r := range results {
		if r.p != nil && t.peers[r.p.rank] != r.p {
			r.p.conn.Close()
		}
	}
	return firstErr
}

func (t *Transport) dial(ctx context.Context, store Store, token []byte, r int) (*peer, error) {
	addr, err := store.Get(ctx, t.key(r))
	if err != nil {
		return nil, fmt.Errorf("tcp: address of rank %d: %w", r, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", string(addr))
	if err != nil {
		return nil, &transport.PeerError{Peer: r, Op: "connect", Err: err}
	}
	p, err := t.handshake(ctx, c.(*net.TCPConn), token, true, r)
	if err != nil {
		c.Close()
		return nil, &transport.PeerError{Peer: r, Op: "connect", Err: err}
	}
	return p, nil
}

// acceptLoop accepts until the listener is closed (connect closes it once
// every expected peer has arrived). Each handshake runs on its own, so a
// stranger that stalls cannot hold up the ranks behind it; strangers are
// refused, counted and logged, and the job goes on.
func (t *Transport) acceptLoop(ctx context.Context, ln net.Listener, token []byte, deliver func(*peer, error)) {
	var hs sync.WaitGroup
	defer hs.Wait()
	var mu sync.Mutex
	seen := make(map[int]bool)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				deliver(nil, fmt.Errorf("tcp: accept: %w", err))
			}
			return
		}
		hs.Add(1)
		go func() {
			defer hs.Done()
			p, err := t.handshake(ctx, c.(*net.TCPConn), token, false, -1)
			if err == nil {
				mu.Lock()
				dup := seen[p.rank]
				seen[p.rank] = true
				mu.Unlock()
				if dup {
					err = fmt.Errorf("rank %d connected twice", p.rank)
				}
			}
			if err != nil {
				c.Close()
				if ctx.Err() == nil {
					t.refused.Add(1)
					logging.L().Warn("tcp: refused a connection", "rank", t.rank, "remote", c.RemoteAddr().String(), "err", err)
				}
				return
			}
			deliver(p, nil)
		}()
	}
}

func (t *Transport) handshake(ctx context.Context, c *net.TCPConn, token []byte, dialer bool, want int) (*peer, error) {
	deadline := time.Now().Add(t.opts.HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := auth.Handshake(c, token, auth.Mesh, dialer, deadline); err != nil {
		return nil, err
	}
	c.SetDeadline(deadline)
	if _, err := c.Write(t.hello().marshal()); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	buf := make([]byte, helloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	h, err := parseHello(buf)
	if err != nil {
		return nil, err
	}
	if err := t.check(h, want); err != nil {
		return nil, err
	}
	if !stop() && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	c.SetNoDelay(true)
	return t.newPeer(int(h.rank), c), nil
}

func (t *Transport) newPeer(r int, c *net.TCPConn) *peer {
	p := &peer{
		t:       t,
		rank:    r,
		conn:    c,
		slab:    make([]byte, t.opts.Slots*t.opts.SlotSize),
		ready:   make(chan transport.Message, t.opts.Slots),
		credits: make(chan struct{}, t.opts.Slots),
		wbuf:    make([]byte, frameHdrLen+smallSend),
		dead:    make(chan struct{}),
	}
	for i := 0; i < t.opts.Slots; i++ {
		p.credits <- struct{}{}
	}
	return p
}

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// MaxMessage implements transport.Transport.
func (t *Transport) MaxMessage() int { return t.opts.SlotSize }

// Refused counts connections to the data port turned away during Connect.
func (t *Transport) Refused() int { return int(t.refused.Load()) }

func (t *Transport) peer(r int, op string) (*peer, error) {
	if r < 0 || r >= t.size || r == t.rank {
		return nil, fmt.Errorf("tcp: %s: rank %d is not a peer of rank %d in a job of %d", op, r, t.rank, t.size)
	}
	select {
	case <-t.closed:
		return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
	default:
	}
	return t.peers[r], nil
}

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, to int, b []byte) error {
	p, err := t.peer(to, "send to")
	if err != nil {
		return err
	}
	if len(b) > t.opts.SlotSize {
		return fmt.Errorf("tcp: send of %d bytes to rank %d exceeds the %d-byte slot", len(b), to, t.opts.SlotSize)
	}
	select {
	case <-p.credits:
	default:
		select {
		case <-p.credits:
		case <-p.dead:
			return p.error("send to")
		case <-t.closed:
			return &transport.PeerError{Peer: to, Op: "send to", Err: transport.ErrClosed}
		case <-ctx.Done():
			return &transport.PeerError{Peer: to, Op: "send to", Err: ctx.Err()}
		}
	}
	slot := p.sendSeq % t.opts.Slots
	p.sendSeq++
	return p.write(ctx, frameData, slot, b)
}

// write puts one frame on the wire. A write cut short by ctx leaves a
// partial frame behind, so the connection is then failed for good.
func (p *peer) write(ctx context.Context, kind byte, slot int, b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	select {
	case <-p.dead:
		return p.error("send to")
	default:
	}
	hdr := p.wbuf[:frameHdrLen]
	hdr[0] = kind
	hdr[1] = 0
	binary.LittleEndian.PutUint16(hdr[2:], uint16(slot))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(b)))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(p.pending.Swap(0)))

	var stop func() bool
	if ctx.Done() != nil {
		p.dlMu.Lock()
		p.writing = true
		p.dlMu.Unlock()
		stop = context.AfterFunc(ctx, func() {
			p.dlMu.Lock()
			if p.writing {
				p.conn.SetWriteDeadline(time.Unix(1, 0))
			}
			p.dlMu.Unlock()
		})
	}
	var err error
	if len(b) <= smallSend {
		n := copy(p.wbuf[frameHdrLen:], b)
		_, err = p.conn.Write(p.wbuf[:frameHdrLen+n])
	} else {
		bufs := net.Buffers{hdr, b}
		_, err = bufs.WriteTo(p.conn)
	}
	if stop != nil {
		p.dlMu.Lock()
		p.writing = false
		if !stop() {
			p.conn.SetWriteDeadline(time.Time{})
		}
		p.dlMu.Unlock()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
			p.fail(fmt.Errorf("stream cut by cancellation mid-frame: %w", err))
			return &transport.PeerError{Peer: p.rank, Op: "send to", Err: err}
		}
		p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
		return p.error("send to")
	}
	return nil
}

// Recv implements transport.Transport.
func (t *Transport) Recv(ctx context.Context, from int) (transport.Message, error) {
	p, err := t.peer(from, "recv from")
	if err != nil {
		return transport.Message{}, err
	}
	select {
	case m := <-p.ready:
		return m, nil
	default:
	}
	select {
	case m := <-p.ready:
		return m, nil
	case <-p.dead:
		// What the peer delivered before it went comes first.
		select {
		case m := <-p.ready:
			return m, nil
		default:
		}
		return transport.Message{}, p.error("recv from")
	case <-t.closed:
		return transport.Message{}, &transport.PeerError{Peer: from, Op: "recv from", Err: transport.ErrClosed}
	case <-ctx.Done():
		return transport.Message{}, &transport.PeerError{Peer: from, Op: "recv from", Err: ctx.Err()}
	}
}

// Release implements transport.Transport.
func (t *Transport) Release(m transport.Message) {
	p := t.peers[m.Peer]
	if p == nil {
		return
	}
	if int(p.pending.Add(1)) >= max(1, t.opts.Slots/2) {
		p.flushCredits()
	}
}

func (p *peer) flushCredits() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	n := p.pending.Swap(0)
	if n == 0 {
		return
	}
	select {
	case <-p.dead:
		return
	default:
	}
	hdr := p.wbuf[:frameHdrLen]
	clear(hdr)
	hdr[0] = frameCredit
	binary.LittleEndian.PutUint32(hdr[8:], uint32(n))
	if _, err := p.conn.Write(hdr); err != nil {
		p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
	}
}

func (p *peer) readLoop() {
	defer p.t.readers.Done()
	opts := p.t.opts
	r := bufio.NewReaderSize(p.conn, 64<<10)
	var hdr [frameHdrLen]byte
	recvSeq := 0
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			p.readFailed(err)
			return
		}
		kind := hdr[0]
		slot := int(binary.LittleEndian.Uint16(hdr[2:]))
		n := int(binary.LittleEndian.Uint32(hdr[4:]))
		credits := int(binary.LittleEndian.Uint32(hdr[8:]))
		if credits > opts.Slots {
			p.fail(fmt.Errorf("%w: %d credits returned, only %d slots exist: %w", transport.ErrPeerLost, credits, opts.Slots, errProtocol))
			return
		}
		for i := 0; i < credits; i++ {
			select {
			case p.credits <- struct{}{}:
			default:
				p.fail(fmt.Errorf("%w: more credits returned than slots lent: %w", transport.ErrPeerLost, errProtocol))
				return
			}
		}
		switch kind {
		case frameCredit:
			if n != 0 {
				p.fail(fmt.Errorf("%w: credit frame with a %d-byte payload: %w", transport.ErrPeerLost, n, errProtocol))
				return
			}
		case frameData:
			if n > opts.SlotSize || slot != recvSeq%opts.Slots {
				p.fail(fmt.Errorf("%w: frame of %d bytes for slot %d (expected slot %d, at most %d bytes): %w",
					transport.ErrPeerLost, n, slot, recvSeq%opts.Slots, opts.SlotSize, errProtocol))
				return
			}
			buf := p.slab[slot*opts.SlotSize : slot*opts.SlotSize+n : slot*opts.SlotSize+n]
			if _, err := io.ReadFull(r, buf); err != nil {
				p.readFailed(err)
				return
			}
			recvSeq++
			select {
			case p.ready <- transport.Message{Data: buf, Peer: p.rank, Slot: slot}:
			default:
				p.fail(fmt.Errorf("%w: peer wrote into a slot it held no credit for: %w", transport.ErrPeerLost, errProtocol))
				return
			}
		case frameBye:
			p.byeSeen.Store(true)
			p.fail(transport.ErrPeerClosed)
			// Drain to EOF so our own close does not reset the peer.
			io.Copy(io.Discard, io.LimitReader(r, 1<<20))
			return
		default:
			p.fail(fmt.Errorf("%w: unknown frame kind %d: %w", transport.ErrPeerLost, kind, errProtocol))
			return
		}
	}
}

func (p *peer) readFailed(err error) {
	select {
	case <-p.t.closed:
		p.fail(transport.ErrClosed)
		return
	default:
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		p.fail(fmt.Errorf("%w: connection closed without goodbye (process died?)", transport.ErrPeerLost))
		return
	}
	p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
}

// fail marks the peer unusable with cause err (the first cause wins) and
// wakes everyone waiting on it.
func (p *peer) fail(err error) {
	p.failOnce.Do(func() {
		p.err = err
		close(p.dead)
		if !errors.Is(err, transport.ErrPeerClosed) {
			p.conn.Close()
		}
	})
}

func (p *peer) error(op string) error {
	return &transport.PeerError{Peer: p.rank, Op: op, Err: p.err}
}

// Close implements transport.Transport. It wakes every pending call, says
// goodbye to every peer and waits (at most CloseLinger) for them to do the
// same, so that no frame still in flight is lost to a connection reset, then
// releases everything.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		linger := time.Now().Add(t.opts.CloseLinger)
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			// A writer stuck on a hung peer lets go of wmu by the deadline.
			p.conn.SetWriteDeadline(linger)
			p.wmu.Lock()
			if lost := p.failed(); lost == nil || errors.Is(lost, transport.ErrPeerClosed) {
				var bye [frameHdrLen]byte
				bye[0] = frameBye
				p.conn.Write(bye[:])
			}
			p.conn.CloseWrite()
			p.wmu.Unlock()
		}
		done := make(chan struct{})
		go func() { t.readers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(linger)):
		}
		for _, p := range t.peers {
			if p != nil {
				p.fail(transport.ErrClosed)
				p.conn.Close()
			}
		}
		<-done
	})
	return nil
}

// failed is the peer's failure cause, or nil while it is healthy.
func (p *peer) failed() error {
	select {
	case <-p.dead:
		return p.err
	default:
		return nil
	}
}

var _ transport.Transport = (*Transport)(nil)
