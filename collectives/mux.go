package collectives

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gocoll/gocoll/transport"
)

// A Mux shares one transport between several communicators (a job and the
// sub-communicators split from it) and the point-to-point messages of
// each. A message carries a 16-byte lane header: the communicator's id
// and a lane within it (0 for collectives, 1+tag for point-to-point).
// One kind goes without, the commonest: a collective's first message to
// a peer on the job's communicator (id 0), whose call header, starting
// with bytes no lane header does, says whose it is; so a 16-byte
// allreduce over shared memory fits the cache line the receiver polls.
//
// Receiving: one goroutine at a time pulls from a peer's stream (the
// transport's contract). A message for the lane being waited for is
// handed over in its slot, as without a mux. A message for any other lane
// is copied out, its slot released at once, and queued for that lane:
// so a communicator that is not receiving never holds a slot, and the
// sender's later messages (for any lane) still find credits. The price of
// that is memory: a lane nobody receives from queues without bound, as an
// MPI implementation buffers unexpected eager messages.
//
// Sending: sends to one peer are serialised message by message, so lanes
// interleave on the wire and a large transfer on one communicator does not
// hold the others back for more than one message. A transport that takes
// a message in parts (transport.PartSender) gets the header and the
// payload apart and copies both into the slot; otherwise the header is
// copied in front of the payload in a per-peer buffer, one memory copy
// more per message.
// A sender that must wait (for its turn, or for the peer to free a slot)
// reads the peer's stream into the queues meanwhile: messages nobody is
// receiving yet must not hold the slots that would let both sides move.
type Mux struct {
	t       transport.Transport
	credits transport.CreditReporter // t's, or nil
	parts   transport.PartSender     // t's, or nil
	peers   []*muxPeer
	// t's rank and largest message, asked once: every message needs
	// them, and a small message cannot afford an interface call for each.
	rank, maxMessage int
}

// MuxHeader is the bytes the mux adds to a message (to all but a job
// collective's first to a peer: see Mux); a multiple of 8 so that
// payloads keep their alignment in the slot.
const MuxHeader = 16

const muxMagic = 0x584d4347 // "GCMX"

// queuedSlot marks a message that was copied out of its slot.
const queuedSlot = -1 << 30

type lane struct {
	comm uint64
	lane uint32
}

// muxPeer is the state of one peer's stream. The two flags, sending and
// busy, are taken and given back with atomics, so that a collective's
// messages, which nearly always find them free, pay no lock: a lock and a
// channel operation on each side of every message were half the cost of
// an 8-byte allreduce over shared memory. A goroutine that finds a flag
// taken counts itself in waiters first, then tries again, then sleeps on
// a channel made under mu; whoever gives a flag back and sees waiters
// closes that channel under mu. As the count goes up before the second
// try, a flag given back after that try always sees it.
type muxPeer struct {
	sending atomic.Bool // one sender at a time
	busy    atomic.Bool // a goroutine pulls from the stream or holds a message in its slot
	waiters atomic.Int32
	queued  atomic.Int64 // messages in queues; changed under mu
	sendBuf []byte

	mu     sync.Mutex
	wake   chan struct{} // closed when a flag is given back or a queue grows; nil until someone waits
	queues map[lane][][]byte
	gone   map[uint64]bool // closed communicators: their late messages are dropped
}

// NewMux shares t. Every rank must use a mux on t, or none.
//
// maxMessage caps the messages the mux sends (0: t.MaxMessage()). Every
// rank must pass the same value, at most its own t.MaxMessage(): the
// collectives cut a long buffer into messages of the channel's MaxMessage,
// and a receiver expects them cut as it would cut them itself. Ranks whose
// transports differ (a rank alone on its host talks TCP only, its peers
// also shared memory, whose slots are smaller) agree on the job's smallest.
func NewMux(t transport.Transport, maxMessage int) *Mux {
	if maxMessage <= 0 || maxMessage > t.MaxMessage() {
		maxMessage = t.MaxMessage()
	}
	n := t.Size()
	if c, ok := t.(interface{ Capacity() int }); ok && c.Capacity() > n {
		// Ranks past the job's size may join it (TCP's Spare): the
		// channels of a grown communicator name them.
		n = c.Capacity()
	}
	m := &Mux{t: t, peers: make([]*muxPeer, n), rank: t.Rank(), maxMessage: maxMessage}
	m.credits, _ = t.(transport.CreditReporter)
	m.parts, _ = t.(transport.PartSender)
	for i := range m.peers {
		m.peers[i] = &muxPeer{queues: map[lane][][]byte{}, gone: map[uint64]bool{}}
	}
	return m
}

// Transport is the shared transport.
func (m *Mux) Transport() transport.Transport { return m.t }

// sendTo sends p to peer on lane l, behind the header of the call hdr
// if there is one (which the mux writes behind its own, so that the
// caller need not copy the payload behind it).
func (m *Mux) sendTo(ctx context.Context, peer int, l lane, hdr *header, p []byte) error {
	room := m.maxMessage - MuxHeader
	if hdr != nil {
		room -= hdrLen
	}
	if uint(peer) >= uint(len(m.peers)) || len(p) > room || peer == m.rank {
		return m.sendOdd(peer, l, hdr, p)
	}
	ps := m.peers[peer]
	if !ps.sending.CompareAndSwap(false, true) {
		if err := m.lockSend(ctx, peer); err != nil {
			return err
		}
	}
	// Not deferred: this is every small message's path.
	err := m.sendLocked(ctx, ps, peer, l, hdr, p)
	m.unlockSend(peer)
	return err
}

// sendOdd is sendTo for what is not a message to another rank: bad
// arguments, or a message to this rank itself (point-to-point only),
// which has no stream and goes straight to the queue. It is out of line,
// so that sendTo's frame is a small message's.
//
//go:noinline
func (m *Mux) sendOdd(peer int, l lane, hdr *header, p []byte) error {
	n := len(p)
	if hdr != nil {
		n += hdrLen
	}
	if peer < 0 || peer >= len(m.peers) {
		return fmt.Errorf("mux: send to rank %d of %d: %w", peer, len(m.peers), ErrInvalid)
	}
	if n > m.maxMessage-MuxHeader {
		return fmt.Errorf("mux: message of %d bytes exceeds %d: %w", n, m.maxMessage-MuxHeader, ErrInvalid)
	}
	d := make([]byte, 0, n)
	if hdr != nil {
		d = d[:hdrLen]
		hdr.put(d)
	}
	d = append(d, p...)
	ps := m.peers[peer]
	ps.mu.Lock()
	ps.queues[l] = append(ps.queues[l], d)
	ps.queued.Add(1)
	ps.signal()
	ps.mu.Unlock()
	return nil
}

// sendLocked is sendTo's work, with the right to send to peer taken.
func (m *Mux) sendLocked(ctx context.Context, ps *muxPeer, peer int, l lane, hdr *header, p []byte) error {
	if ps.sendBuf == nil {
		ps.sendBuf = make([]byte, m.maxMessage)
	}
	var b []byte
	h := MuxHeader
	if hdr != nil && l == (lane{}) {
		// The job's collective lane: the call header alone (see Mux).
		h = hdrLen
		b = ps.sendBuf[:h+len(p)]
		hdr.put(b)
	} else {
		if hdr != nil {
			h += hdrLen
		}
		b = ps.sendBuf[:h+len(p)]
		binary.LittleEndian.PutUint32(b[0:], muxMagic)
		binary.LittleEndian.PutUint32(b[4:], l.lane)
		binary.LittleEndian.PutUint64(b[8:], l.comm)
		if hdr != nil {
			hdr.put(b[MuxHeader:])
		}
	}
	if m.parts != nil {
		// Straight from p into the peer's slot, if one is free.
		if sent, err := m.parts.SendParts(ctx, peer, b[:h], p, false); sent || err != nil {
			return err
		}
	}
	if m.credits != nil && m.credits.HasCredit(peer) {
		return m.send(ctx, peer, b, h, p)
	}
	// The peer's slots are all taken. They free up only as a reader on
	// the peer's side takes messages out, and that reader may be waiting,
	// as this sender is, for credits from us: for instance when every
	// message either side sent is for a lane nobody is receiving from yet.
	// So while this send waits, this rank keeps reading the peer's stream.
	stop := m.drainWhile(ctx, peer)
	defer stop()
	return m.send(ctx, peer, b, h, p)
}

// send sends p behind the h bytes of headers at the start of b, waiting
// for a credit: in two parts if the transport takes them, else joined in
// b.
func (m *Mux) send(ctx context.Context, peer int, b []byte, h int, p []byte) error {
	if m.parts != nil {
		if sent, err := m.parts.SendParts(ctx, peer, b[:h], p, true); sent || err != nil {
			return err
		}
	}
	copy(b[h:], p)
	return m.t.Send(ctx, peer, b)
}

// lockSend takes the right to send to peer, once the caller found it
// taken. The goroutine holding it may be waiting for credits; see
// sendLocked for why a waiter keeps reading.
func (m *Mux) lockSend(ctx context.Context, peer int) error {
	ps := m.peers[peer]
	for {
		if ps.sending.CompareAndSwap(false, true) {
			return nil
		}
		w, ok := ps.await(&ps.sending)
		if ok {
			return nil
		}
		stop := m.drainWhile(ctx, peer)
		select {
		case <-w:
		case <-ctx.Done():
		}
		stop()
		ps.waiters.Add(-1)
		if ctx.Err() != nil {
			return &transport.PeerError{Peer: peer, Op: "send to", Err: ctx.Err()}
		}
	}
}

func (m *Mux) unlockSend(peer int) { m.peers[peer].giveBack(&m.peers[peer].sending) }

// await is the slow way to take flag (see muxPeer): it counts the caller
// among the waiters and tries again. If that fails, the caller waits on w
// and then takes itself off the count; if it succeeds, it is off already.
func (p *muxPeer) await(flag *atomic.Bool) (w chan struct{}, ok bool) {
	p.mu.Lock()
	w = p.waitChan()
	p.waiters.Add(1)
	p.mu.Unlock()
	if flag.CompareAndSwap(false, true) {
		p.waiters.Add(-1)
		return nil, true
	}
	return w, false
}

// giveBack clears flag and wakes the waiters, if there are any.
func (p *muxPeer) giveBack(flag *atomic.Bool) {
	flag.Store(false)
	if p.waiters.Load() > 0 {
		p.wakeWaiters()
	}
}

// wakeWaiters is giveBack's rare half, out of line so that giveBack is
// inlined.
//
//go:noinline
func (p *muxPeer) wakeWaiters() {
	p.mu.Lock()
	p.signal()
	p.mu.Unlock()
}

// drainWhile reads peer's stream into the lanes' queues, whenever no
// other goroutine is reading it, until stop is called (or ctx ends or
// the stream fails, which the caller's own wait reports).
func (m *Mux) drainWhile(ctx context.Context, peer int) (stop func()) {
	ps := m.peers[peer]
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for dctx.Err() == nil {
			w, ok := ps.await(&ps.busy)
			if ok {
				if err := m.drain(dctx, peer); err != nil && dctx.Err() == nil {
					return
				}
				continue
			}
			select {
			case <-w:
			case <-dctx.Done():
			}
			ps.waiters.Add(-1)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// drain queues every message from peer until ctx ends; the caller has
// set busy, which drain clears.
func (m *Mux) drain(ctx context.Context, peer int) error {
	p := m.peers[peer]
	defer p.giveBack(&p.busy)
	for {
		msg, err := m.t.Recv(ctx, peer)
		if err != nil {
			return err
		}
		if err := m.queue(peer, msg); err != nil {
			return err
		}
	}
}

// queue copies msg out of its slot into its lane's queue and releases
// the slot.
func (m *Mux) queue(peer int, msg transport.Message) error {
	got, data, ok := laneOf(msg.Data)
	if !ok {
		m.t.Release(msg)
		return &transport.PeerError{Peer: peer, Op: "recv from",
			Err: fmt.Errorf("%d bytes without a communicator header (a peer not sharing its connections the same way): %w", len(msg.Data), ErrMismatch)}
	}
	d := append([]byte(nil), data...)
	m.t.Release(msg)
	p := m.peers[peer]
	p.mu.Lock()
	if !p.gone[got.comm] {
		p.queues[got] = append(p.queues[got], d)
		p.queued.Add(1)
		p.signal()
	}
	p.mu.Unlock()
	return nil
}

// signal wakes every waiter on p. A small collective's messages come and
// go without anyone waiting, so the channel is made only for a waiter
// (waitChan). Both run with p.mu held.
func (p *muxPeer) signal() {
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

func (p *muxPeer) waitChan() chan struct{} {
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	return p.wake
}

// recvFrom receives the next message for lane l from peer into out. The
// message is written through out, not returned: a Message returned by
// value up through the layers was copied at each one, a measurable part
// of a small collective's time.
func (m *Mux) recvFrom(ctx context.Context, peer int, l lane, out *transport.Message) error {
	if uint(peer) >= uint(len(m.peers)) {
		return fmt.Errorf("mux: receive from rank %d of %d: %w", peer, len(m.peers), ErrInvalid)
	}
	p := m.peers[peer]
	self := peer == m.rank
	// The usual case: nothing queued, nobody else reading. While this
	// goroutine holds busy nobody else queues, so a count of 0 read after
	// taking it means there is nothing queued for l to overtake.
	if !self && p.busy.CompareAndSwap(false, true) {
		if p.queued.Load() == 0 {
			return m.recvStream(ctx, p, peer, l, out)
		}
		p.giveBack(&p.busy)
	}
	for {
		p.mu.Lock()
		if q := p.queues[l]; len(q) > 0 {
			d := q[0]
			q[0] = nil
			if len(q) == 1 {
				delete(p.queues, l)
			} else {
				p.queues[l] = q[1:]
			}
			p.queued.Add(-1)
			p.mu.Unlock()
			*out = transport.Message{Data: d, Peer: int32(peer), Slot: queuedSlot}
			return nil
		}
		w := p.waitChan()
		p.waiters.Add(1)
		// Taken under mu, so that no message for l can be queued between
		// the look at the queue above and this.
		ok := !self && p.busy.CompareAndSwap(false, true)
		p.mu.Unlock()
		if ok {
			p.waiters.Add(-1)
			return m.recvStream(ctx, p, peer, l, out)
		}
		select {
		case <-w:
			p.waiters.Add(-1)
		case <-ctx.Done():
			p.waiters.Add(-1)
			return &transport.PeerError{Peer: peer, Op: "recv from", Err: ctx.Err()}
		}
	}
}

// recvStream pulls from peer's stream, queueing what is for other lanes,
// until a message for l comes; the caller has taken busy, which stays
// taken until that message is released.
func (m *Mux) recvStream(ctx context.Context, p *muxPeer, peer int, l lane, out *transport.Message) error {
	for {
		msg, err := m.t.Recv(ctx, peer)
		if err != nil {
			p.giveBack(&p.busy)
			return err
		}
		if got, data, ok := laneOf(msg.Data); ok && got == l {
			out.Data, out.Peer, out.Slot = data, msg.Peer, msg.Slot
			return nil // busy until Release
		}
		if err := m.queue(peer, msg); err != nil {
			p.giveBack(&p.busy)
			return err
		}
	}
}

// laneOf is the lane of message b and what it carries for that lane, or
// false if b is not a mux's message: behind a lane header, or, for the
// job's collectives, the whole message, a call header first (see Mux).
func laneOf(b []byte) (lane, []byte, bool) {
	if len(b) >= MuxHeader && binary.LittleEndian.Uint32(b) == muxMagic {
		return lane{comm: binary.LittleEndian.Uint64(b[8:]), lane: binary.LittleEndian.Uint32(b[4:])}, b[MuxHeader:], true
	}
	if len(b) >= hdrLen && binary.LittleEndian.Uint16(b) == hdrMagic && b[2] == hdrVer {
		return lane{}, b, true
	}
	return lane{}, nil, false
}

func (m *Mux) release(msg transport.Message) {
	if msg.Slot == queuedSlot {
		return
	}
	m.t.Release(msg)
	p := m.peers[msg.Peer]
	p.giveBack(&p.busy)
}

// forget drops what is queued for communicator id and whatever arrives
// for it later.
func (m *Mux) forget(id uint64) {
	for _, p := range m.peers {
		p.mu.Lock()
		p.gone[id] = true
		for l, q := range p.queues {
			if l.comm == id {
				p.queued.Add(-int64(len(q)))
				delete(p.queues, l)
			}
		}
		p.mu.Unlock()
	}
}

// Channel is one communicator's view of a Mux: a transport.Transport over
// a subset of the job's ranks (its members, in their new rank order),
// carrying the communicator's collectives. It also carries the
// communicator's point-to-point messages (SendTagged, RecvTagged).
//
// It forwards LossNotifier and Aborter to the shared transport: a lost
// peer is lost to every communicator, and aborting one drops the shared
// connections. Close forgets the communicator but leaves the shared
// transport open.
type Channel struct {
	m     *Mux
	id    uint64
	ranks []int // job rank of each member
	rank  int
	once  sync.Once
	locks p2pLocks
}

// Channel makes the view of communicator id, whose members are the job
// ranks in ranks (member i is ranks[i]); this rank must be one of them.
// Every member must use the same id and ranks, and ids must differ between
// communicators that share a pair of ranks.
func (m *Mux) Channel(id uint64, ranks []int) (*Channel, error) {
	me := -1
	for i, r := range ranks {
		if r < 0 || r >= len(m.peers) {
			return nil, fmt.Errorf("mux: member %d is job rank %d, outside [0, %d): %w", i, r, len(m.peers), ErrInvalid)
		}
		if r == m.rank {
			me = i
		}
	}
	if me < 0 {
		return nil, fmt.Errorf("mux: job rank %d is not among the members %v: %w", m.rank, ranks, ErrInvalid)
	}
	return &Channel{m: m, id: id, ranks: append([]int(nil), ranks...), rank: me}, nil
}

// Busy lists the job ranks this process is receiving from or sending to
// right now: a call blocked there waits on them. It may be called from
// any goroutine.
func (m *Mux) Busy() (recv, send []int) {
	for r, p := range m.peers {
		if r == m.rank || p == nil {
			continue
		}
		if p.busy.Load() || p.waiters.Load() > 0 {
			recv = append(recv, r)
		}
		if p.sending.Load() {
			send = append(send, r)
		}
	}
	return recv, send
}

// Size is the number of job ranks the mux can address: the job's, and
// the ranks that may join it (see NewMux).
func (m *Mux) Size() int { return len(m.peers) }

// JobRank is the job rank of member r.
func (c *Channel) JobRank(r int) int { return c.ranks[r] }

// Rank implements transport.Transport.
func (c *Channel) Rank() int { return c.rank }

// Size implements transport.Transport.
func (c *Channel) Size() int { return len(c.ranks) }

// MaxMessage implements transport.Transport: the mux's cap (see NewMux),
// less the lane header.
func (c *Channel) MaxMessage() int { return c.m.maxMessage - MuxHeader }

func (c *Channel) peer(r int, op string) (int, error) {
	if uint(r) >= uint(len(c.ranks)) {
		return 0, c.notMember(r, op)
	}
	return c.ranks[r], nil
}

// notMember is peer's error, out of line so that peer is inlined.
//
//go:noinline
func (c *Channel) notMember(r int, op string) error {
	return fmt.Errorf("%s rank %d of a communicator of %d: %w", op, r, len(c.ranks), ErrInvalid)
}

// Send implements transport.Transport.
func (c *Channel) Send(ctx context.Context, peer int, p []byte) error {
	return c.send(ctx, peer, 0, nil, p)
}

// send sends p to member peer on lane ln, behind the call header hdr if
// there is one: call.send passes its header this way for a call's first
// message to a peer, and the mux writes it into the message itself, so p
// is not first copied behind it.
func (c *Channel) send(ctx context.Context, peer int, ln uint32, hdr *header, p []byte) error {
	jr, err := c.peer(peer, "send to")
	if err != nil {
		return err
	}
	if err := c.m.sendTo(ctx, jr, lane{c.id, ln}, hdr, p); err != nil {
		return c.renumber(err, peer)
	}
	return nil
}

// renumber gives a peer's error from the mux, which numbers ranks as the
// job does, this communicator's numbering, as every other rank in its
// errors has ("recv from rank 1: job rank 5: peer lost ..."), with the
// job rank in a JobRankError.
func (c *Channel) renumber(err error, peer int) error {
	pe, ok := err.(*transport.PeerError)
	if !ok {
		return err
	}
	return &transport.PeerError{Peer: peer, Op: pe.Op, Err: &JobRankError{Rank: pe.Peer, Renumbered: pe.Peer != peer, Err: pe.Err}}
}

// JobRankError is the cause inside the *transport.PeerError a Channel
// returns: that PeerError numbers the peer as the communicator does, and
// Rank is the same peer's rank in the job, as the shared transport
// numbers it, so that what reads the error (internal/blame) reads both
// numbers from fields. A PeerError without one numbers its peer as the
// transport that made it does, in the job. Where the two numbers differ
// (Renumbered) it reads "job rank 5: " before Err; else as Err.
type JobRankError struct {
	Rank       int
	Renumbered bool
	Err        error
}

func (e *JobRankError) Error() string {
	if !e.Renumbered {
		return e.Err.Error()
	}
	return fmt.Sprintf("job rank %d: %v", e.Rank, e.Err)
}

func (e *JobRankError) Unwrap() error { return e.Err }

// Recv implements transport.Transport. The Message's Peer is the member
// rank.
func (c *Channel) Recv(ctx context.Context, peer int) (transport.Message, error) {
	return c.recv(ctx, peer, 0)
}

func (c *Channel) recv(ctx context.Context, peer int, ln uint32) (transport.Message, error) {
	jr, err := c.peer(peer, "recv from")
	if err != nil {
		return transport.Message{}, err
	}
	var msg transport.Message
	err = c.m.recvFrom(ctx, jr, lane{c.id, ln}, &msg)
	msg.Peer = int32(peer)
	if err != nil {
		return msg, c.renumber(err, peer)
	}
	return msg, nil
}

// Release implements transport.Transport.
func (c *Channel) Release(m transport.Message) {
	if m.Peer >= 0 && int(m.Peer) < len(c.ranks) {
		m.Peer = int32(c.ranks[m.Peer])
		c.m.release(m)
	}
}

// Close forgets the communicator; the shared transport stays open.
func (c *Channel) Close() error {
	c.once.Do(func() { c.m.forget(c.id) })
	return nil
}

// Lost forwards the shared transport's LossNotifier (a channel that never
// closes if it has none).
func (c *Channel) Lost() <-chan struct{} {
	if ln, ok := c.m.t.(transport.LossNotifier); ok {
		return ln.Lost()
	}
	return nil
}

// LostErr forwards the shared transport's LossNotifier.
func (c *Channel) LostErr() error {
	if ln, ok := c.m.t.(transport.LossNotifier); ok {
		return ln.LostErr()
	}
	return nil
}

// Abort drops the shared connections (see transport.Aborter), or closes
// the shared transport if it cannot abort.
func (c *Channel) Abort(cause error) error { return transport.Abort(c.m.t, cause) }

// Register forwards the shared transport's Registrar: memory registered
// once serves every channel. A transport that cannot send from
// registered memory registers nothing, and deregister does nothing.
func (c *Channel) Register(p []byte) (deregister func() error, err error) {
	return transport.Register(c.m.t, p)
}
