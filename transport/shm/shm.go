//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/safetext"
	"github.com/gocoll/gocoll/transport"
)

// Transport is the shared-memory mesh of one rank. See package transport
// for the contract and the package doc for the design.
type Transport struct {
	rank, size int
	opts       Options
	links      *mesh.Links[peer]
	store      transport.Store
	token      []byte
	ln         *net.UnixListener

	closing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	// refs counts the transport itself, the calls inside Send, Recv and
	// Release, and every message handed out and not yet released: the
	// rings are unmapped only when it drops to zero, so neither Close nor
	// Abort can pull memory from under a copy or a reduce in progress.
	refs      atomic.Int64
	unmapOnce sync.Once
	readers   sync.WaitGroup
	door      *mesh.Door // admits the peers that dial this rank (links.go)
	loss      *mesh.Loss
}

type peer struct {
	t    *Transport
	rank int
	pid  int
	// local: the peer is a goroutine of this process (comm.NewLocal,
	// tests), which a crowded wait yields to differently (mesh.YieldCPU).
	local bool
	conn  *net.UnixConn
	in    *ring // peer -> us, in the memfd we created
	out   *ring // us -> peer, in the memfd the peer created

	recvSeq  uint64      // messages received (only the receiving goroutine)
	sendSeq  uint64      // messages sent (only the sending goroutine)
	headSeen uint64      // the peer's head when last read (sending goroutine)
	sender   storeSender // how long bodies are written (sending goroutine)
	judge    storeJudge  // which way of writing them is cheaper (receiving side)

	mesh.Fault // how the link failed, once
}

// Connect makes this rank reachable by its size-1 peers, which must all
// run on this host: it listens, publishes where, and returns. Links come
// as calls first need them (see links.go), or all at once here with
// Options.Eager. The store must stay open as long as the transport:
// a first contact reads the peer's address from it.
func Connect(ctx context.Context, store transport.Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("shm: rank %d of size %d", rank, size)
	}
	t := &Transport{
		rank:   rank,
		size:   size,
		opts:   opts,
		store:  store,
		token:  token,
		closed: make(chan struct{}),
		loss:   mesh.NewLoss(lossGrace),
	}
	t.links = mesh.NewLinks(rank, size, mesh.LinkConfig[peer]{
		Dial:        t.dial,
		Transient:   transient,
		Linked:      t.linked,
		Unreachable: t.unreachable,
		Discard:     func(p *peer) { p.release() },
		Grace:       dialGrace,
		DeclineWait: opts.HandshakeTimeout,
	})
	t.refs.Store(1)
	if size == 1 {
		return t, nil
	}
	if store == nil {
		return nil, fmt.Errorf("shm: a job of %d ranks needs a rendezvous store", size)
	}
	if err := t.listen(ctx); err != nil {
		t.Abort(err)
		return nil, err
	}
	logging.L().Debug("shm transport listening", "rank", rank, "size", size, "eager", opts.Eager, "slots", opts.Slots, "slot_size", opts.SlotSize)
	return t, nil
}

// hello is what each end of a link says after authenticating: what
// every transport's hello says (mesh.Hello), then this process's pid.
type hello struct {
	mesh.Hello
	pid uint32
}

// helloLayout puts the pid at 20 and the namespace's hash at 24.
var helloLayout = mesh.HelloLayout{Magic: "SHM1", Len: helloLen, NamespaceAt: 24, What: "shm"}

const helloLen = 32

func (h hello) marshal() []byte {
	b := helloLayout.Marshal(h.Hello)
	binary.LittleEndian.PutUint32(b[20:], h.pid)
	return b
}

func parseHello(b []byte) (h hello, err error) {
	if h.Hello, err = helloLayout.Parse(b); err == nil {
		h.pid = binary.LittleEndian.Uint32(b[20:])
	}
	return h, err
}

func (t *Transport) hello() hello {
	return hello{mesh.NewHello(t.rank, t.size, t.opts.LinkOptions), uint32(os.Getpid())}
}

// check validates a peer's hello against ours. want is the expected rank,
// or -1 when any other rank may be calling.
func (t *Transport) check(h hello, want int) error {
	return h.Check(t.hello().Hello, want, t.size)
}

func (t *Transport) key(r int) string {
	return t.opts.Namespace + "shm/addr/" + strconv.Itoa(r)
}

func (t *Transport) receiveRing(c *net.UnixConn) (*ring, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, fmt.Errorf("receive the peer's ring: %w", err)
	}
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n != 1 || b[0] != 'R' || len(fds) != 1 {
		return nil, fmt.Errorf("the peer passed %d descriptors with %q, want one ring: %w", len(fds), b[:n], errProtocol)
	}
	return openRing(fds[0], t.opts.Slots, t.opts.SlotSize)
}

// release unmaps a peer's rings and closes its socket; for links made
// after Close began.
func (p *peer) release() {
	p.in.unmap()
	p.out.unmap()
	if p.conn != nil {
		p.conn.Close()
	}
}

// watch reads the peer's socket until it ends: the goodbye byte says the
// peer closes in order; end of stream without it says the peer is gone.
func (p *peer) watch() {
	defer p.t.readers.Done()
	var pending []byte // control bytes not yet parsed: at most one partial abort notice
	var b [512]byte
	bye := false
	for {
		n, err := p.conn.Read(b[:])
		pending = append(pending, b[:n]...)
		used, gotBye, cerr := control(p.t.jobRank(p.rank), pending, bye)
		bye = gotBye
		pending = append(pending[:0], pending[used:]...)
		if cerr != nil {
			p.fail(cerr)
		}
		if err != nil {
			switch {
			case p.t.closing.Load():
			case bye:
				p.fail(transport.ErrPeerClosed)
			default:
				p.fail(fmt.Errorf("%w: process %d ended without goodbye (died or aborted)", transport.ErrPeerLost, p.pid))
			}
			return
		}
	}
}

// jobRank is the job rank of rank r of this mesh (see Options.JobRanks).
func (t *Transport) jobRank(r int) int {
	if r >= 0 && r < len(t.opts.JobRanks) {
		return t.opts.JobRanks[r]
	}
	return r
}

// The control socket carries, besides its end, at most two things:
// ctlBye, an orderly goodbye, and ctlAbort + uint16 length + text, why
// the peer is about to drop out (see Abort).
const (
	ctlBye       = 'B'
	ctlAbort     = 'A'
	maxAbortText = 512
)

// control acts on the whole control messages at the front of b: it says
// how many bytes it used, whether a goodbye came, and why the peer is lost
// if it is (an abort notice, or bytes that break the protocol).
func control(rank int, b []byte, bye bool) (int, bool, error) {
	used := 0
	for used < len(b) {
		switch b[used] {
		case ctlBye:
			bye = true
			used++
		case ctlAbort:
			if len(b)-used < 3 {
				return used, bye, nil
			}
			n := int(binary.LittleEndian.Uint16(b[used+1:]))
			if n > maxAbortText {
				return len(b), bye, fmt.Errorf("%w: abort notice of %d bytes (at most %d): %w", transport.ErrPeerLost, n, maxAbortText, errProtocol)
			}
			if len(b)-used < 3+n {
				return used, bye, nil
			}
			return used + 3 + n, bye, fmt.Errorf("%w: rank %d gave up: %s", transport.ErrPeerLost, rank, safetext.Printable(b[used+3:used+3+n]))
		default:
			return len(b), bye, fmt.Errorf("%w: unexpected byte %#x on the control socket: %w", transport.ErrPeerLost, b[used], errProtocol)
		}
	}
	return used, bye, nil
}

// fail marks the peer unusable (the first cause wins) and wakes every
// call parked on one of its rings.
func (p *peer) fail(err error) {
	if p.Fail(err, p.t.loss) {
		p.wakeAll()
	}
}

func (p *peer) wakeAll() {
	// Only the counters are touched, and they stay mapped while any call
	// holds a reference; a peer's rings are unmapped only after the
	// readers stopped (see unmap). A receiver parks on the sequence word
	// of the slot it expects next; which one is its own business, so every
	// slot is woken (this happens once per peer, at loss or close).
	for i := uint64(0); i < p.in.slots; i++ {
		wake(p.in.seq(i))
	}
	wake(low(p.out.head))
}

// lossGrace is how long after a peer is lost the loss is announced
// through Lost. Calls involving the peer fail at once; the delay is for
// the communicator above, which breaks as soon as Lost fires: a peer that
// quit because it saw a mismatch left its header in our ring, and this
// rank should get to read it and report the mismatch, as it would over
// TCP (where the loss is only seen after the data before it), rather than
// a bare "peer lost". It is short against the time a job takes to notice
// a dead rank any other way.
const lossGrace = 50 * time.Millisecond

// Lost implements transport.LossNotifier.
func (t *Transport) Lost() <-chan struct{} { return t.loss.Lost() }

// LostErr implements transport.LossNotifier: every peer lost so far, in
// the order noticed.
func (t *Transport) LostErr() error { return t.loss.LostErr() }

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// MaxMessage implements transport.Transport.
func (t *Transport) MaxMessage() int { return t.opts.SlotSize }

// enter takes a reference for a call, and reports false once the
// transport is closed: the caller then gives the reference back (exit)
// and fails. (Not exiting here keeps enter small enough to inline.)
func (t *Transport) enter() bool {
	t.refs.Add(1)
	return !t.closing.Load()
}

func (t *Transport) exit() {
	if t.refs.Add(-1) == 0 {
		t.lastExit()
	}
}

// lastExit unmaps the rings once the last reference is gone; out of line,
// so that exit is inlined.
//
//go:noinline
func (t *Transport) lastExit() { t.unmapOnce.Do(t.unmap) }

func (t *Transport) unmap() {
	// The readers may still wake futexes on a dying peer's rings.
	t.readers.Wait()
	t.links.Each(func(_ int, p *peer) {
		p.in.unmap()
		p.out.unmap()
	})
}

// lookup is the link to r, or nil if r is not linked (yet) or not a
// peer. Every message's path asks it, so it is kept small enough to
// inline.
func (t *Transport) lookup(r int) *peer { return t.links.Get(r) }

// notPeer is the error for a rank that is not a peer, out of line: the
// message paths call lookup and only come here on failure.
//
//go:noinline
func (t *Transport) notPeer(r int, op string) error {
	return fmt.Errorf("shm: %s: rank %d is not a peer of rank %d in a job of %d", op, r, t.rank, t.size)
}

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, to int, b []byte) error {
	_, err := t.send(ctx, to, nil, b, true)
	return err
}

// SendParts implements transport.PartSender.
func (t *Transport) SendParts(ctx context.Context, to int, head, body []byte, wait bool) (bool, error) {
	return t.send(ctx, to, head, body, wait)
}

// send writes head and body, as one message, into the next slot of the
// ring to rank to. With no credit left it waits for one, or, unless
// wait, returns false at once.
func (t *Transport) send(ctx context.Context, to int, head, body []byte, wait bool) (bool, error) {
	p := t.lookup(to)
	if p == nil {
		var err error
		if p, err = t.link(ctx, to, "send to"); err != nil {
			return false, err
		}
	}
	n := len(head) + len(body)
	if n > t.opts.SlotSize {
		return false, fmt.Errorf("shm: send of %d bytes to rank %d exceeds the %d-byte slot", n, to, t.opts.SlotSize)
	}
	if !t.enter() {
		t.exit()
		return false, &transport.PeerError{Peer: to, Op: "send to", Err: transport.ErrClosed}
	}
	// Not deferred: this is every small message's path.
	sent, err := t.put(ctx, p, head, body, wait)
	t.exit()
	return sent, err
}

// put is send's work, inside a reference.
func (t *Transport) put(ctx context.Context, p *peer, head, body []byte, wait bool) (bool, error) {
	if p.Failed() != nil {
		return false, p.Error("send to")
	}
	r := p.out
	seq := p.sendSeq
	// The receiver's head is read only when the credits last seen run
	// out: most sends then touch no cache line the receiver writes.
	for seq-p.headSeen >= r.slots {
		released := r.head.Load()
		if released > seq || seq-released > r.slots {
			p.fail(fmt.Errorf("%w: released %d of %d messages sent: %w", transport.ErrPeerLost, released, seq, errProtocol))
			return false, p.Error("send to")
		}
		p.headSeen = released
		if seq-released < r.slots {
			break
		}
		if !wait {
			return false, nil
		}
		err := t.wait(ctx, p, low(r.head), r.txSleep, func() bool { return seq-r.head.Load() < r.slots })
		if err != nil {
			return false, &transport.PeerError{Peer: p.rank, Op: "send to", Err: err}
		}
		if p.Failed() != nil {
			return false, p.Error("send to")
		}
	}
	n := len(head) + len(body)
	slot := r.slot(seq)
	dst, lead := r.place(slot, n, len(head))
	var mark uint32
	if n <= inlineMax {
		fillTailFirst(dst, head, body)
	} else if len(body) < nonTemporalMin {
		copy(dst[copy(dst, head):], body)
	} else {
		mark = p.copyLong(r, slot, dst[copy(dst, head):], body)
	}
	if n > inlineMax {
		// Stored with the length and the sequence word, not before the
		// copy: they share the line the receiver polls, and a store to
		// it first would take the line from the receiver only for its
		// next poll to take it back while the body is copied, and the
		// sequence word's store would wait for it a second time.
		*r.lead(slot) = lead
		*r.mark(slot) = mark
	}
	*r.len(slot) = uint32(n)
	// The store publishes the payload and its length: Go's atomics are
	// sequentially consistent, and on amd64 stores are not reordered
	// with older stores anyway.
	w := r.seq(slot)
	w.Store(uint32(seq + 1))
	p.sendSeq = seq + 1
	if r.rxSleep.Load() != 0 {
		wake(w)
	}
	return true, nil
}

// HasCredit implements transport.CreditReporter.
func (t *Transport) HasCredit(to int) bool {
	p := t.lookup(to)
	if p == nil || p.Failed() != nil {
		return true // Send links the peer, or says what went wrong
	}
	seq := p.sendSeq
	if seq-p.headSeen < p.out.slots {
		return true
	}
	// Kept, so that the Send that follows does not read the receiver's
	// cache line again: only this goroutine sends to p.
	p.headSeen = p.out.head.Load()
	return seq-p.headSeen < p.out.slots
}

// Recv implements transport.Transport.
func (t *Transport) Recv(ctx context.Context, from int) (transport.Message, error) {
	p := t.lookup(from)
	if p == nil {
		var err error
		if p, err = t.link(ctx, from, "recv from"); err != nil {
			return transport.Message{}, err
		}
	}
	if !t.enter() {
		t.exit()
		return transport.Message{}, &transport.PeerError{Peer: from, Op: "recv from", Err: transport.ErrClosed}
	}
	r := p.in
	seq := p.recvSeq
	slot := r.slot(seq)
	w := r.seq(slot)
	// Before message seq lands, its slot still holds the one a lap
	// earlier (or nothing yet).
	var before uint32
	if seq >= r.slots {
		before = uint32(seq + 1 - r.slots)
	}
	for {
		v := w.Load()
		if v == uint32(seq+1) {
			n := int(*r.len(slot))
			if n > r.slotSize {
				p.fail(fmt.Errorf("%w: message of %d bytes in a %d-byte slot: %w", transport.ErrPeerLost, n, r.slotSize, errProtocol))
				break
			}
			data, ok := r.placed(slot, n)
			if !ok {
				p.fail(fmt.Errorf("%w: message of %d bytes starting %d bytes before the end of the slot header (at most 63): %w", transport.ErrPeerLost, n, *r.lead(slot), errProtocol))
				break
			}
			if n > inlineMax {
				if mark := *r.mark(slot); mark&markTimed != 0 {
					p.judge.arm(int32(slot), mark, *r.copyNS(slot), n)
				}
			}
			p.recvSeq = seq + 1
			// The reference taken by enter now belongs to the message:
			// Release returns it.
			return transport.Message{Data: data, Peer: int32(from), Slot: int32(slot)}, nil
		}
		if v != before {
			p.fail(fmt.Errorf("%w: slot %d holds message %d, expected %d or %d: %w", transport.ErrPeerLost, slot, v, before, uint32(seq+1), errProtocol))
			break
		}
		if p.Failed() != nil {
			break // what the peer delivered came first, above
		}
		err := t.wait(ctx, p, w, r.rxSleep, func() bool { return w.Load() != before })
		if err != nil {
			t.exit()
			return transport.Message{}, &transport.PeerError{Peer: from, Op: "recv from", Err: err}
		}
	}
	t.exit()
	return transport.Message{}, p.Error("recv from")
}

// Release implements transport.Transport.
func (t *Transport) Release(m transport.Message) {
	p := t.lookup(int(m.Peer))
	if p == nil {
		return
	}
	r := p.in
	if p.judge.armed.Load() {
		if changed, nt := p.judge.released(m.Slot); changed {
			var v uint32
			if nt {
				v = 1
			}
			r.stores().Store(v)
		}
	}
	r.head.Add(1)
	if r.txSleep.Load() != 0 {
		wake(low(r.head))
	}
	t.exit()
}

// wait returns once ready() holds, or p failed (the caller looks), or with
// an error once ctx ends or the transport closes. It polls for Spin, then
// parks on the futex word counter, having raised flag so that the other
// side wakes it.
func (t *Transport) wait(ctx context.Context, p *peer, counter, flag *atomic.Uint32, ready func() bool) error {
	if t.opts.Spin > 0 {
		yieldEvery, clockEvery := 256, 1024
		if t.opts.Crowded {
			yieldEvery, clockEvery = 4, 64
		}
		// Ranks of an in-process job share this process's cores: the
		// Go scheduler gets a turn at every clock reading, and, where
		// this goroutine holds the process's only P, every
		// mesh.SolePolls polls if that is more often.
		schedEvery := clockEvery
		// The clock is read only once the first polls found nothing: a
		// small message is usually there within them.
		var until time.Time
		for i := 1; ; i++ {
			if ready() || p.Failed() != nil {
				return nil
			}
			if i > eagerPolls {
				relax(relaxPerPoll)
			} else if i == eagerPolls {
				schedEvery = mesh.TurnEvery(schedEvery)
			}
			if i%clockEvery == 0 {
				if err := t.stopped(ctx); err != nil {
					return err
				}
				now := time.Now()
				if until.IsZero() {
					until = now.Add(t.opts.Spin)
				} else if now.After(until) {
					break
				}
			}
			if i%schedEvery == 0 {
				runtime.Gosched()
			}
			if i%yieldEvery == 0 {
				// And ranks in other processes may share this core: on a
				// crowded host the peer we wait for is often queued
				// behind us, and would run only once we park.
				mesh.YieldCPU(p.local)
			}
		}
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { wake(counter) })
		defer stop()
	}
	defer flag.Store(0)
	for {
		flag.Store(1)
		v := counter.Load()
		if ready() || p.Failed() != nil {
			return nil
		}
		if err := t.stopped(ctx); err != nil {
			return err
		}
		park(counter, v, parkSlice)
	}
}

// A wait polls eagerPolls times back to back, as a small message's
// reply is usually there within them; after that it gives the CPU's
// spin-wait hint relaxPerPoll times between polls (see relax), as a
// spin-wait loop should: one PAUSE delays seeing a message by tens of
// cycles at most.
const (
	eagerPolls   = 64
	relaxPerPoll = 1
)

func (t *Transport) stopped(ctx context.Context) error {
	if t.closing.Load() {
		return transport.ErrClosed
	}
	return ctx.Err()
}

// Close implements transport.Transport: it says goodbye to every linked
// peer (the others learn of it through the store, as a dial refused),
// stops links in the making and waits for them, wakes every pending call
// with ErrClosed and releases the rings once the last call has left and
// the last message is released. Messages already sent are in the
// receivers' memory, so nothing in flight is lost.
func (t *Transport) Close() error {
	t.shutdown([]byte{ctlBye})
	t.links.Wait()
	return nil
}

// Abort implements transport.Aborter: the sockets close without goodbye,
// so every peer sees this rank lost at once, after a notice saying cause
// (the control sockets carry nothing else, so it never waits behind data).
func (t *Transport) Abort(cause error) error {
	var notice []byte
	if cause != nil {
		why := cause.Error()
		if len(why) > maxAbortText {
			why = why[:maxAbortText-3] + "..."
		}
		notice = binary.LittleEndian.AppendUint16([]byte{ctlAbort}, uint16(len(why)))
		notice = append(notice, why...)
	}
	t.shutdown(notice)
	return nil
}

// shutdown ends every peer's control socket after writing last to it
// (a goodbye, an abort notice, or nothing).
func (t *Transport) shutdown(last []byte) {
	t.closeOnce.Do(func() {
		t.loss.Stop() // failures from here on are goodbyes, not losses
		t.closing.Store(true)
		close(t.closed)
		// No link forms after this: the set Each sees is final.
		t.links.Shut()
		if t.ln != nil {
			t.ln.Close()
		}
		t.links.Each(func(_ int, p *peer) {
			if last != nil {
				p.conn.SetWriteDeadline(time.Now().Add(time.Second))
				p.conn.Write(last)
			}
			p.conn.Close()
			p.Fail(transport.ErrClosed, nil)
			p.wakeAll()
		})
		t.exit()
	})
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.LossNotifier = (*Transport)(nil)
)
