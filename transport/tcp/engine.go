//go:build unix

package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/safetext"
	"github.com/gocoll/gocoll/transport"
)

// errNoEngine says why Connect cannot build a mesh on this system: nil
// here, on Unix (see engine_stub.go for the rest).
var errNoEngine error

const (
	// pollSliceMs bounds one blocking poll, so cancellation and Close are
	// noticed even when no socket stirs.
	pollSliceMs = 20
	// rbufSize is each peer's read-ahead buffer: small frames arrive many
	// to a read(2). Payload remainders of directRead bytes or more bypass it
	// and are read straight into the slot.
	rbufSize   = 64 << 10
	directRead = 16 << 10
)

// Transport is the TCP mesh of one rank. See package transport for the
// contract and the package doc for the design.
type Transport struct {
	rank, size int
	opts       Options
	links      *mesh.Links[peer] // the link to each rank, made on demand (links.go)
	list       []*peer           // the linked peers, in poll order (the progress holder's)
	pfds       []unix.PollFd
	wakefd     int // polled: a write to wakewr interrupts a blocking poll (Close)
	wakewr     int // the same eventfd on Linux, a pipe's write end elsewhere
	// ring is where the progress holder parks, on Linux, instead of
	// blocking in poll(2), when this process holds more engines than Ps
	// (parkedPoll): the process's bell or wake rings it. bellID,
	// enrolled (how many of list the bell holds) and ringTimer are the
	// progress holder's.
	ring      chan struct{}
	bellID    uint32
	enrolled  int
	ringTimer *time.Timer
	waits     mesh.Waits // how long the waits drive served took: the progress holder's

	// progress is held (a value sent in) by the one goroutine currently
	// driving the sockets; the others wait for their message or credit, or
	// for their turn.
	progress  chan struct{}
	closing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	loss      *mesh.Loss // the peers lost, first noticed first

	// Links on demand (links.go). The store and token serve the dials;
	// door admits the peers that dial this rank.
	store    transport.Store
	token    []byte
	ln       net.Listener
	door     *mesh.Door
	arrivals mesh.Arrivals[peer] // linked, not yet in list
}

// newTransport is a transport with no links yet.
func newTransport(rank, size int, opts Options) *Transport {
	t := &Transport{
		rank:     rank,
		size:     size,
		opts:     opts,
		closed:   make(chan struct{}),
		loss:     mesh.NewLoss(0),
		progress: make(chan struct{}, 1),
		wakefd:   -1,
		ring:     make(chan struct{}, 1),
	}
	t.links = t.newLinks(size + opts.Spare)
	return t
}

type peer struct {
	t    *Transport
	rank int
	fd   int

	// Inbound, touched only by the goroutine holding t.progress.
	rbuf       []byte
	rpos, rend int
	body       []byte // the slot being filled; nil between frames
	bodyGot    int
	bodySlot   int
	recvSeq    int
	ended      bool // the peer's stream is over (goodbye or EOF)
	slab       []byte
	ready      chan transport.Message
	recvNote   chan struct{} // a message arrived
	sendNote   chan struct{} // a credit arrived, or the socket became writable
	wantWrite  atomic.Bool   // a writer waits for POLLOUT
	writable   atomic.Bool
	credits    chan struct{} // one token per free slot at the peer
	sendSeq    int           // only the one sending goroutine touches it
	pending    atomic.Int32  // slots released here, not yet reported to the peer
	wmu        sync.Mutex    // one frame on the wire at a time
	wbuf       []byte        // header + small payload scratch, under wmu
	tailBuf    [frameHdrLen + tagLen]byte
	tail       []byte       // unwritten rest of a credit frame, under wmu
	tailLen    atomic.Int32 // len(tail), readable without wmu
	closeFdOne sync.Once

	mesh.Fault // how the link failed, once

	// A sealed link's (Options.Encrypt), nil on a plain one. seal,
	// ebuf are under wmu; open, rhdr, rcredits are the progress
	// holder's. Each slot of the slab is stride bytes apart: SlotSize,
	// and a tag's room on a sealed link.
	seal     *sealer
	open     *sealer
	ebuf     []byte // a sealed frame being written
	rhdr     [frameHdrLen]byte
	rcredits int
	stride   int
}

func (t *Transport) newPeer(r int, c *net.TCPConn, keys *linkKeys) (*peer, error) {
	// The descriptor leaves the runtime's netpoller: progress is driven by
	// the calls themselves, with non-blocking reads and poll(2).
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	c.Close()
	if derr != nil {
		return nil, fmt.Errorf("dup socket: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if err := watchSilence(fd, t.opts.SilentPeer); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return t.peerOnFd(r, fd, keys), nil
}

// sockopt is one socket option watchSilence sets.
type sockopt struct {
	level, name, value int
	what               string
	// bestEffort options are skipped where the system refuses them:
	// keepalive alone still catches a silent host on an idle link.
	bestEffort bool
}

// watchSilence has the kernel declare the connection dead once the peer's
// host has been silent for d: keepalive probes from d/3 on, every d/6,
// four of them unanswered, and, where a socket can have one, a limit of d
// on retransmitting unacknowledged data (TCP_USER_TIMEOUT on Linux). Which
// of these a socket may set is the system's (keepaliveTuning, one per
// system; elsewhere its own timers apply). Without a retransmission limit
// (FreeBSD, for one), data a silent host never acknowledges is given up
// only at the kernel's own limit, and keepalive covers an idle link only.
// The engine then sees ETIMEDOUT on the socket like any other loss.
func watchSilence(fd int, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	idle := max(int(d/3/time.Second), 1)
	intvl := max(int(d/6/time.Second), 1)
	opts := append([]sockopt{{level: unix.SOL_SOCKET, name: unix.SO_KEEPALIVE, value: 1, what: "SO_KEEPALIVE"}},
		keepaliveTuning(idle, intvl, d)...)
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil && !o.bestEffort {
			return fmt.Errorf("tcp: setsockopt %s=%d: %w", o.what, o.value, err)
		}
	}
	return nil
}

// peerOnFd sets up the state of peer r around an open, non-blocking
// stream socket; keys, if not nil, seal its frames.
func (t *Transport) peerOnFd(r, fd int, keys *linkKeys) *peer {
	stride := t.opts.SlotSize
	if keys != nil {
		stride += tagLen
	}
	p := &peer{
		t:        t,
		rank:     r,
		fd:       fd,
		rbuf:     make([]byte, rbufSize),
		slab:     make([]byte, t.opts.Slots*stride),
		stride:   stride,
		ready:    make(chan transport.Message, t.opts.Slots),
		recvNote: make(chan struct{}, 1),
		sendNote: make(chan struct{}, 1),
		credits:  make(chan struct{}, t.opts.Slots),
		wbuf:     make([]byte, frameHdrLen+smallSend),
		Fault:    mesh.NewFault(r),
	}
	for i := 0; i < t.opts.Slots; i++ {
		p.credits <- struct{}{}
	}
	if keys != nil {
		p.seal, p.open = keys.send, keys.recv
		p.ebuf = make([]byte, frameHdrLen+t.opts.SlotSize+tagLen)
	}
	return p
}

func (p *peer) closeFd() {
	p.closeFdOne.Do(func() { unix.Close(p.fd) })
}

// start readies the progress engine, before any link forms: links join
// its poll list as they come (adopt).
func (t *Transport) start() error {
	r, w, err := wakePair()
	if err != nil {
		return err
	}
	t.wakefd, t.wakewr = r, w
	t.pfds = make([]unix.PollFd, 1, 8)
	engines.Add(1)
	return nil
}

// engines counts the engines started in this process and not yet closed:
// the ranks that may be waiting in it at once.
var engines atomic.Int64

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// MaxMessage implements transport.Transport.
func (t *Transport) MaxMessage() int { return t.opts.SlotSize }

// Recv implements transport.Transport.
func (t *Transport) Recv(ctx context.Context, from int) (transport.Message, error) {
	p, err := t.link(ctx, from, "recv from")
	if err != nil {
		return transport.Message{}, err
	}
	return mesh.Receive(p.ready, &p.Fault, func(ready func() bool) error { return t.await(ctx, p, p.recvNote, ready) })
}

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, to int, b []byte) error {
	_, err := t.SendParts(ctx, to, nil, b, true)
	return err
}

// SendParts implements transport.PartSender: head and body go to the
// kernel in one writev behind the frame header, so the mux's header needs
// no buffer joining it to the payload. A peer not linked yet is linked
// first, wait or not: its slots are all free.
func (t *Transport) SendParts(ctx context.Context, to int, head, body []byte, wait bool) (bool, error) {
	p, err := t.link(ctx, to, "send to")
	if err != nil {
		return false, err
	}
	if n := len(head) + len(body); n > t.opts.SlotSize {
		return false, fmt.Errorf("tcp: send of %d bytes to rank %d exceeds the %d-byte slot", n, to, t.opts.SlotSize)
	}
	retried := false
	for {
		select {
		case <-p.credits:
			slot := p.sendSeq % t.opts.Slots
			p.sendSeq++
			return true, p.writeData(ctx, slot, head, body)
		default:
		}
		if p.Failed() != nil {
			return false, p.Error("send to")
		}
		if !wait {
			// A credit may be waiting in the socket, unread: read once
			// without blocking, unless another goroutine is reading.
			if retried {
				return false, nil
			}
			retried = true
			select {
			case t.progress <- struct{}{}:
				err := t.pass(0)
				<-t.progress
				if err != nil {
					return false, err
				}
			default:
				return false, nil
			}
			continue
		}
		if err := t.await(ctx, p, p.sendNote, func() bool { return len(p.credits) > 0 }); err != nil {
			return false, &transport.PeerError{Peer: to, Op: "send to", Err: err}
		}
	}
}

// HasCredit implements transport.CreditReporter.
// A peer not linked yet has every slot free: Send links it first.
func (t *Transport) HasCredit(to int) bool {
	p := t.links.Get(to)
	return p == nil || len(p.credits) > 0 || p.Failed() != nil
}

// Release implements transport.Transport.
func (t *Transport) Release(m transport.Message) {
	p := t.links.Get(int(m.Peer))
	if p == nil {
		return
	}
	p.pending.Add(1)
	p.flushCredits()
}

// flushCredits reports released slots if a batch is owed and no writer
// holds the socket; a writer that does carries them in its data frame or
// flushes them as it unlocks (unlockWrite), so none is left stranded.
func (p *peer) flushCredits() {
	for int(p.pending.Load()) >= p.t.creditBatch() && p.Failed() == nil && p.wmu.TryLock() {
		before := p.pending.Load()
		p.flushCreditsLocked()
		p.wmu.Unlock()
		if p.pending.Load() >= before {
			return // the socket is full: the next pass retries on POLLOUT
		}
	}
}

// unlockWrite gives up wmu, then flushes credits released while it was
// held: their Release found wmu taken and left them to the holder, which
// may have built its frame before they came.
func (p *peer) unlockWrite() {
	p.wmu.Unlock()
	p.flushCredits()
}

// creditBatch is how many released slots are reported in one credit frame
// when no data frame going back can carry them. Fewer than all slots, so
// the sender never runs dry waiting for a batch to fill.
func (t *Transport) creditBatch() int { return max(1, t.opts.Slots/2) }

// await returns once ready() holds, or p failed (the caller looks), or
// with an error once ctx ends or the transport closes. Meanwhile it either
// drives the sockets itself or, when another goroutine does, waits to be
// told that something arrived for p or that its turn has come.
func (t *Transport) await(ctx context.Context, p *peer, note chan struct{}, ready func() bool) error {
	return mesh.Await(ctx, t.progress, t.closed, note, p.Dead(), ready,
		func() bool { return p.Failed() != nil },
		func() error { return t.drive(ctx, p, ready) })
}

// drive runs the progress engine until ready() holds, p fails, ctx ends
// or the transport closes: busy-polling for Options.Spin, then blocking in
// poll(2) a slice at a time. While the waits before it ran longer than
// that, it spins only briefly (mesh.Waits): across namespace hosts on 2
// cores, with links shaped to 1 Gbit/s, a 1 ms spin per wait held a
// 2-rank allreduce to 92-94% of the line rate, and no spin to 95.5%.
func (t *Transport) drive(ctx context.Context, p *peer, ready func() bool) error {
	start := time.Now()
	spinUntil := start.Add(t.waits.Spin(t.opts.Spin))
	spins, turnEvery := 0, -1 // turnEvery decided at the first empty poll
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		timeout := 0
		if stop != nil || time.Now().After(spinUntil) {
			timeout = pollSliceMs
			if stop == nil && ctx.Done() != nil {
				stop = context.AfterFunc(ctx, t.wake)
			}
		}
		if err := t.pass(timeout); err != nil {
			return err
		}
		if ready() || p.Failed() != nil {
			t.waits.Done(time.Since(start))
			return nil
		}
		if timeout == 0 {
			if turnEvery < 0 {
				// A crowded wait gives the Go scheduler a turn every 64
				// polls (on every poll it cost 10-20% at small sizes, 4
				// ranks on 2 cores), one with a core to itself none,
				// unless it holds the process's only P (mesh.TurnEvery).
				turnEvery = 0
				if t.opts.Crowded {
					turnEvery = 64
				}
				turnEvery = mesh.TurnEvery(turnEvery)
			}
			if t.opts.Crowded {
				// The peer we wait for is likely queued behind us on
				// this CPU, or, in a job of one process, on this P
				// (this process holds the engines of several ranks).
				mesh.YieldCPU(engines.Load() > 1)
			}
			if spins++; turnEvery > 0 && spins%turnEvery == 0 {
				runtime.Gosched()
			}
		}
		if err := mesh.Ended(ctx, t.closed); err != nil {
			return err
		}
	}
}

// closeWake closes the descriptors of wake: the engine is done.
func (t *Transport) closeWake() {
	engines.Add(-1)
	t.leaveBell()
	unix.Close(t.wakefd)
	if t.wakewr != t.wakefd {
		unix.Close(t.wakewr)
	}
}

// wake interrupts a blocking poll.
func (t *Transport) wake() {
	var one [8]byte
	one[0] = 1
	unix.Write(t.wakewr, one[:])
	notify(t.ring)
}

// needsWrite says whether p waits for its socket to take bytes: a blocked
// sender, a frame's tail, or a batch of credits owed that could not go.
func (p *peer) needsWrite() bool {
	return p.wantWrite.Load() || p.tailPending() || int(p.pending.Load()) >= p.t.creditBatch()
}

// pass polls every live peer once (waiting up to timeoutMs for something
// to happen), reads whatever arrived into the slots, and flushes credits
// and frame tails that could not be written earlier.
func (t *Transport) pass(timeoutMs int) error {
	t.adopt()
	// A busy poll with one peer linked (every wait of a 2-rank job) that
	// only waits to read reads at once: a poll would cost a system call
	// before the read that takes the bytes, 10% of a small allreduce
	// over loopback. A read that finds nothing costs what the poll did.
	if timeoutMs == 0 && len(t.list) == 1 {
		if p := t.list[0]; !p.ended && p.Failed() == nil {
			p.flushCredits()
			if !p.needsWrite() {
				p.readAll()
				return nil
			}
		}
	}
	for i, p := range t.list {
		fd := int32(p.fd)
		if p.ended || p.Failed() != nil {
			fd = -1 // poll skips it
		} else {
			p.flushCredits()
		}
		ev := int16(unix.POLLIN)
		if p.needsWrite() {
			ev |= unix.POLLOUT
		}
		t.pfds[i] = unix.PollFd{Fd: fd, Events: ev}
	}
	t.pfds[len(t.list)] = unix.PollFd{Fd: int32(t.wakefd), Events: unix.POLLIN}
	var n int
	var err error
	switch {
	case timeoutMs == 0:
		n, err = pollNow(t.pfds)
	case engines.Load() > int64(runtime.GOMAXPROCS(0)):
		n, err = t.parkedPoll(timeoutMs)
	default:
		n, err = unix.Poll(t.pfds, timeoutMs)
	}
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("tcp: poll: %w", err)
	}
	if n <= 0 {
		return nil
	}
	for i, p := range t.list {
		re := t.pfds[i].Revents
		if re == 0 {
			continue
		}
		if re&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0 {
			p.readAll()
		}
		if re&(unix.POLLOUT|unix.POLLHUP|unix.POLLERR) != 0 {
			p.writable.Store(true)
			notify(p.sendNote)
			if p.tailPending() && p.wmu.TryLock() {
				p.flushCreditsLocked()
				p.wmu.Unlock()
			}
			p.flushCredits() // what was released meanwhile, or a batch owed
		}
	}
	if t.pfds[len(t.list)].Revents != 0 {
		var buf [8]byte
		unix.Read(t.wakefd, buf[:])
	}
	return nil
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// readAll reads everything the socket holds, landing payloads in slots.
func (p *peer) readAll() {
	for !p.ended && p.Failed() == nil {
		p.parse()
		if p.ended || p.Failed() != nil {
			return
		}
		var n, asked int
		var err error
		if p.body != nil && p.rpos == p.rend && len(p.body)-p.bodyGot >= directRead {
			asked = len(p.body) - p.bodyGot
			n, err = readNB(p.fd, p.body[p.bodyGot:])
			if n > 0 {
				p.bodyGot += n
				if p.bodyGot == len(p.body) {
					if p.open != nil {
						p.openData()
					} else {
						p.deliver()
					}
				}
			}
		} else {
			if p.rpos > 0 {
				p.rend = copy(p.rbuf, p.rbuf[p.rpos:p.rend])
				p.rpos = 0
			}
			asked = len(p.rbuf) - p.rend
			n, err = readNB(p.fd, p.rbuf[p.rend:])
			if n > 0 {
				p.rend += n
			}
		}
		if err == nil && n > 0 && n < asked {
			// A short read means the socket is drained for now: parse
			// what came and save the read that would only say EAGAIN.
			// Anything arriving later wakes the next poll.
			p.parse()
			return
		}
		switch {
		case err == unix.EAGAIN:
			return
		case err == unix.EINTR:
		case err == unix.ETIMEDOUT || err == unix.EHOSTUNREACH || err == unix.ENETUNREACH:
			// The kernel gave up on a host that stopped answering
			// (watchSilence); the last error it saw says how.
			p.fail(fmt.Errorf("%w: its host was silent for %v (crashed, powered off or cut off the network): %v", transport.ErrPeerLost, p.t.opts.SilentPeer, err))
			return
		case err != nil:
			p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
			return
		case n == 0:
			p.ended = true
			p.fail(fmt.Errorf("%w: connection closed without goodbye (process died?)", transport.ErrPeerLost))
			return
		}
	}
}

// parse consumes the frames buffered in rbuf.
func (p *peer) parse() {
	if p.open != nil {
		p.parseSealed()
		return
	}
	opts := p.t.opts
	for {
		if p.body != nil {
			n := copy(p.body[p.bodyGot:], p.rbuf[p.rpos:p.rend])
			p.rpos += n
			p.bodyGot += n
			if p.bodyGot < len(p.body) {
				return
			}
			p.deliver()
			continue
		}
		if p.rend-p.rpos < frameHdrLen {
			return
		}
		hdr := p.rbuf[p.rpos : p.rpos+frameHdrLen]
		kind := hdr[0]
		slot := int(binary.LittleEndian.Uint16(hdr[2:]))
		n := int(binary.LittleEndian.Uint32(hdr[4:]))
		credits := int(binary.LittleEndian.Uint32(hdr[8:]))
		if kind == frameAbort {
			// Checked before anything is taken from the buffer: a
			// partly arrived abort frame is parsed again whole.
			if n > maxAbortText || credits != 0 {
				p.rpos += frameHdrLen
				p.protocolError("abort frame of %d bytes with %d credits (at most %d bytes, no credits)", n, credits, maxAbortText)
				return
			}
			if p.rend-p.rpos < frameHdrLen+n {
				return
			}
			why := safetext.Printable(p.rbuf[p.rpos+frameHdrLen : p.rpos+frameHdrLen+n])
			p.rpos += frameHdrLen + n
			p.ended = true
			p.fail(fmt.Errorf("%w: rank %d gave up: %s", transport.ErrPeerLost, p.rank, why))
			return
		}
		p.rpos += frameHdrLen
		if credits > opts.Slots {
			p.protocolError("%d credits returned, only %d slots exist", credits, opts.Slots)
			return
		}
		for i := 0; i < credits; i++ {
			select {
			case p.credits <- struct{}{}:
			default:
				p.protocolError("more credits returned than slots lent")
				return
			}
		}
		if credits > 0 {
			notify(p.sendNote)
		}
		switch kind {
		case frameCredit:
			if n != 0 {
				p.protocolError("credit frame with a %d-byte payload", n)
				return
			}
		case frameData:
			if n > opts.SlotSize || slot != p.recvSeq%opts.Slots {
				p.protocolError("frame of %d bytes for slot %d (expected slot %d, at most %d bytes)", n, slot, p.recvSeq%opts.Slots, opts.SlotSize)
				return
			}
			off := slot * opts.SlotSize
			// The slot was released by whichever goroutine read it last,
			// and the peer refilled it only after hearing so; that order
			// runs through the socket, where the race detector cannot see
			// it. Release's atomic Add, acquired here, shows it.
			p.pending.Load()
			p.body, p.bodyGot, p.bodySlot = p.slab[off:off+n:off+n], 0, slot
			p.recvSeq++
			if n == 0 {
				p.deliver()
			}
		case frameBye:
			p.ended = true
			p.fail(transport.ErrPeerClosed)
			return
		default:
			p.protocolError("unknown frame kind %d", kind)
			return
		}
	}
}

func (p *peer) protocolError(format string, args ...any) {
	p.fail(fmt.Errorf("%w: %s: %w", transport.ErrPeerLost, fmt.Sprintf(format, args...), errProtocol))
}

// deliver hands the completed slot to Recv.
func (p *peer) deliver() {
	m := transport.Message{Data: p.body, Peer: int32(p.rank), Slot: int32(p.bodySlot)}
	p.body = nil
	if p.t.closing.Load() {
		return // nobody will receive it
	}
	select {
	case p.ready <- m:
		notify(p.recvNote)
	default:
		p.protocolError("peer wrote into a slot it held no credit for")
	}
}

func (p *peer) tailPending() bool {
	// Read without wmu: a stale answer only costs one extra or one missed
	// POLLOUT interest, and the next pass corrects it.
	return p.tailLen.Load() > 0
}

// writeData sends one data frame: header and payload (head, then body),
// with any credit frame tail still owed in front. It returns only when
// every byte is with the kernel, so head and body may be reused.
func (p *peer) writeData(ctx context.Context, slot int, head, body []byte) error {
	p.wmu.Lock()
	defer p.unlockWrite()
	if p.Failed() != nil {
		p.t.returnCredit(p)
		return p.Error("send to")
	}
	credits := p.pending.Swap(0)
	hdr := p.wbuf[:frameHdrLen]
	hdr[0] = frameData
	hdr[1] = 0
	binary.LittleEndian.PutUint16(hdr[2:], uint16(slot))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(head)+len(body)))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(credits))
	var iovs [4][]byte
	iov := iovs[:0]
	if len(p.tail) > 0 {
		iov = append(iov, p.tail)
	}
	switch {
	case p.seal != nil:
		iov = append(iov, p.sealData(hdr, head, body))
	case len(head)+len(body) <= smallSend:
		n := copy(p.wbuf[frameHdrLen:], head)
		n += copy(p.wbuf[frameHdrLen+n:], body)
		iov = append(iov, p.wbuf[:frameHdrLen+n])
	case len(head) <= smallSend:
		n := copy(p.wbuf[frameHdrLen:], head)
		iov = append(iov, p.wbuf[:frameHdrLen+n], body)
	default:
		iov = append(iov, hdr, head, body)
	}
	tailLen := len(p.tail)
	written := 0
	for len(iov) > 0 {
		n, err := writevNB(p.fd, iov)
		if n > 0 {
			written += n
			iov = advance(iov, n)
			continue
		}
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			p.writable.Store(false)
			p.wantWrite.Store(true)
			err = p.t.await(ctx, p, p.sendNote, p.writable.Load)
			p.wantWrite.Store(false)
			if err == nil && p.Failed() == nil {
				continue
			}
			if err == nil {
				return p.Error("send to")
			}
		default:
			p.settle(ctx, err)
			return p.Error("send to")
		}
		// Interrupted (ctx or Close).
		if written <= tailLen {
			// Our frame never started: the stream is intact.
			p.tail = p.tail[written:]
			p.tailLen.Store(int32(len(p.tail)))
			p.pending.Add(credits)
			p.t.returnCredit(p)
			if p.seal != nil {
				p.seal.seq-- // no byte of the frame left: its nonce is unused
			}
			return &transport.PeerError{Peer: p.rank, Op: "send to", Err: err}
		}
		p.fail(fmt.Errorf("stream cut mid-frame: %w", err))
		return &transport.PeerError{Peer: p.rank, Op: "send to", Err: err}
	}
	p.tail = nil
	p.tailLen.Store(0)
	return nil
}

// settleTime bounds how long a send that hit a reset waits for the
// receive side to say why the peer went away.
const settleTime = 50 * time.Millisecond

// settle fails p after a send hit werr (a reset, a broken pipe). What the
// peer sent before it went (an abort frame saying why it gave up, or a
// plain end of stream) is still in our receive queue: the engine reads it
// first, so that the peer fails with that cause, naming the rank really
// lost, rather than with a bare "connection reset".
func (p *peer) settle(ctx context.Context, werr error) {
	sctx, cancel := context.WithTimeout(ctx, settleTime)
	p.t.await(sctx, p, p.sendNote, func() bool { return false })
	cancel()
	p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, werr))
}

// returnCredit gives back the credit of a send that never went out.
func (t *Transport) returnCredit(p *peer) {
	p.sendSeq--
	select {
	case p.credits <- struct{}{}:
	default:
	}
}

func advance(iov [][]byte, n int) [][]byte {
	for n > 0 && len(iov) > 0 {
		if n < len(iov[0]) {
			iov[0] = iov[0][n:]
			return iov
		}
		n -= len(iov[0])
		iov = iov[1:]
	}
	for len(iov) > 0 && len(iov[0]) == 0 {
		iov = iov[1:]
	}
	return iov
}

// flushCreditsLocked finishes any frame tail, then reports released slots
// in a credit frame, without blocking: what the socket will not take now
// stays owed and goes on a later pass. Called with wmu held.
func (p *peer) flushCreditsLocked() {
	if p.Failed() != nil {
		return
	}
	if len(p.tail) > 0 {
		n, err := unix.Write(p.fd, p.tail)
		if n > 0 {
			p.tail = p.tail[n:]
			p.tailLen.Store(int32(len(p.tail)))
		}
		if len(p.tail) > 0 {
			if err != nil && err != unix.EAGAIN && err != unix.EINTR {
				p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
			}
			return
		}
	}
	c := p.pending.Swap(0)
	if c == 0 {
		return
	}
	frame := p.tailBuf[:frameHdrLen]
	clear(frame)
	frame[0] = frameCredit
	binary.LittleEndian.PutUint32(frame[8:], uint32(c))
	if p.seal != nil {
		frame = p.seal.aead.Seal(frame, p.seal.next(), nil, frame)
	}
	n, err := unix.Write(p.fd, frame)
	switch {
	case n == len(frame):
	case n > 0:
		p.tail = frame[n:]
		p.tailLen.Store(int32(len(p.tail)))
	case err == unix.EAGAIN || err == unix.EINTR:
		p.pending.Add(c)
		if p.seal != nil {
			p.seal.seq-- // not a byte went: its nonce is unused
		}
	default:
		p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
	}
}

// fail marks the peer unusable with cause err (the first cause wins) and
// wakes everyone waiting on it. The descriptor stays open until Close, so
// its number cannot be reused under a poll in flight.
func (p *peer) fail(err error) { p.Fail(err, p.t.loss) }

// Lost implements transport.LossNotifier.
func (t *Transport) Lost() <-chan struct{} { return t.loss.Lost() }

// LostErr implements transport.LossNotifier: every peer lost so far, in
// the order noticed.
func (t *Transport) LostErr() error { return t.loss.LostErr() }

// Close implements transport.Transport. It wakes every pending call with
// ErrClosed, says goodbye to every peer, and reads on until each has said
// goodbye too (at most CloseLinger), so that no frame still in flight is
// lost to a connection reset; then it releases everything.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.loss.Stop() // failures from here on are goodbyes, not losses
		close(t.closed)
		t.shutLinks()
		t.links.Wait()
		if t.wakefd < 0 {
			// Connect failed before the engine started.
			t.links.Each(func(_ int, p *peer) { p.closeFd() })
			return
		}
		t.wake()
		t.progress <- struct{}{} // the engine is ours for good
		t.closing.Store(true)
		t.adopt()
		deadline := time.Now().Add(t.opts.CloseLinger)
		for _, p := range t.list {
			if err := p.Failed(); err != nil && !errors.Is(err, transport.ErrPeerClosed) {
				continue
			}
			p.wmu.Lock()
			p.goodbye(deadline)
			p.wmu.Unlock()
		}
		for time.Now().Before(deadline) {
			open := false
			for _, p := range t.list {
				if !p.ended && p.Failed() == nil || errors.Is(p.Failed(), transport.ErrPeerClosed) && !p.ended {
					open = true
				}
			}
			if !open {
				break
			}
			t.pass(min(pollSliceMs, int(time.Until(deadline)/time.Millisecond)+1))
		}
		for _, p := range t.list {
			p.fail(transport.ErrClosed)
			p.closeFd()
		}
		t.closeWake()
	})
	return nil
}

// Abort implements transport.Aborter: it resets every connection at once,
// with no goodbye, so that each peer's pending and later calls fail with
// ErrPeerLost naming this rank. Pending calls here return ErrClosed.
// Before the reset, each peer whose connection is between frames and has
// room in its socket buffer is sent cause in an abort frame; a peer
// mid-frame, or too far behind to take it now, just sees the reset.
func (t *Transport) Abort(cause error) error {
	t.closeOnce.Do(func() {
		t.loss.Stop() // failures from here on are goodbyes, not losses
		close(t.closed)
		// Not waited for: dials and handshakes in flight end on their
		// own, and a link registering now finds the door shut.
		t.shutLinks()
		if t.wakefd >= 0 {
			t.wake()
			t.progress <- struct{}{} // no descriptor is closed under a poll
			t.closing.Store(true)
		}
		var why []byte
		if cause != nil {
			why = []byte(cause.Error())
			if len(why) > maxAbortText {
				why = append(why[:maxAbortText-3], "..."...)
			}
		}
		t.links.Each(func(_ int, p *peer) {
			if why != nil && p.fd >= 0 && p.Failed() == nil && p.wmu.TryLock() {
				p.tellAbort(why)
				p.wmu.Unlock()
			}
			p.fail(transport.ErrClosed)
			// A zero linger time makes close send a reset: the peer
			// learns at once, and nothing queued is delivered late.
			unix.SetsockoptLinger(p.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			p.closeFd()
		})
		if t.wakefd >= 0 {
			t.closeWake()
		}
	})
	return nil
}

// tellAbort writes, without waiting, any owed credit-frame tail and then an
// abort frame carrying why. Holding wmu means no data frame is half
// written. A short write leaves a truncated frame, which the reset that
// follows turns into a plain loss on the peer's side.
func (p *peer) tellAbort(why []byte) {
	out := make([]byte, 0, len(p.tail)+frameHdrLen+len(why))
	out = append(out, p.tail...)
	var hdr [frameHdrLen]byte
	hdr[0] = frameAbort
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(why)))
	if p.seal != nil {
		out = append(out, hdr[:]...)
		out = p.seal.aead.Seal(out, p.seal.next(), why, hdr[:])
	} else {
		out = append(append(out, hdr[:]...), why...)
	}
	for len(out) > 0 {
		n, err := unix.Write(p.fd, out)
		if n > 0 {
			out = out[n:]
			continue
		}
		if err != unix.EINTR {
			return
		}
	}
}

// goodbye writes any owed tail and a goodbye frame, then shuts our half of
// the connection, waiting for socket space until deadline at the most.
func (p *peer) goodbye(deadline time.Time) {
	var bye [frameHdrLen]byte
	bye[0] = frameBye
	out := append(append([]byte(nil), p.tail...), bye[:]...)
	if p.seal != nil {
		out = p.seal.aead.Seal(out, p.seal.next(), nil, bye[:])
	}
	for len(out) > 0 && time.Now().Before(deadline) {
		n, err := unix.Write(p.fd, out)
		if n > 0 {
			out = out[n:]
			continue
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLOUT}}
		unix.Poll(fds, min(pollSliceMs, int(time.Until(deadline)/time.Millisecond)+1))
	}
	unix.Shutdown(p.fd, unix.SHUT_WR)
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.LossNotifier = (*Transport)(nil)
)
