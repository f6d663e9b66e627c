//go:build cgo && linux

package rdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// The connection manager makes queue pairs on demand, as rdma_cm would
// over its own channel: each rank listens on one TCP port, published once
// in the store, and the first call that needs a peer makes this rank's
// queue pair to it and dials the peer to exchange the numbers (link,
// dialPeer); every rank admits, for as long as its transport is open,
// whoever dials it (admit), without any call of its user's. Either end
// may be the first to need the pair, so either may dial: waiting for the
// other end could deadlock a rank whose Send goes to a peer busy
// receiving from a third rank, itself waiting on the first.
//
// A rank makes at most one queue pair per peer, the first time it needs
// one or is dialed, and never replaces it; its numbers are what every
// exchange with that peer carries. So an exchange can be repeated (a
// dialer that timed out waiting for the answer dials again) and two at
// once (both ends dialing) bring up the same pair: RTR happens once, and
// a later exchange only checks that the peer's numbers did not change.
// When both ends dial at once the higher rank's connection is the one
// answered, as in tcp (the lower rank gives the higher a moment first,
// see mesh.DialGrace), which spares the pair the second exchange.
//
// One exchange, after the job-token handshake (internal/auth): the dialer
// sends its record (info: its port's address, its queue pair for the
// peer and the receive slab the peer may write); the peer takes its own
// queue pair to RTR and RTS and only then answers with its record, so
// the dialer's first write cannot reach a queue pair not yet receiving
// (dropped, and counted against the retries); the dialer takes its queue
// pair to RTR and RTS, may write from then on, and says so with one byte,
// after which the peer may write too. Both close the connection.

// links is the connection manager's state.
type links struct {
	store   transport.Store
	token   []byte
	ln      net.Listener
	life    context.Context // ends at Close or Abort: dials and handshakes stop
	endLife context.CancelFunc
	bg      sync.WaitGroup // the accept loop, dials and admissions

	// makeMu serializes making queue pairs with each other and with
	// destroy, which must not free the device under one being made.
	makeMu   sync.Mutex
	made     int // queue pairs made, under makeMu
	maxPeers int // how many the completion queue has room for

	linkMu     sync.Mutex
	attempts   map[int]*mesh.Attempt // under linkMu
	stopped    bool                  // under linkMu: no more links
	linkedNote chan struct{}         // closed and replaced as a link comes up, under linkMu
	arrivals   mesh.Arrivals[peer]   // made, not yet adopted by the engine

	door *mesh.Door // admits the ranks that dial this one
}

func (p *peer) isUp() bool {
	select {
	case <-p.up:
		return true
	default:
		return false
	}
}

// rts says whether p's queue pair has reached RTS: a write is then
// either received or fails, never left hanging.
func (p *peer) rts() bool {
	p.cm.Lock()
	defer p.cm.Unlock()
	return p.rtr
}

// markUp says that both ends of p's queue pair receive, so this rank may
// write to it.
func (p *peer) markUp() { p.upOnce.Do(func() { close(p.up) }) }

// startLinks listens, publishes the address, and with Options.Eager
// brings up every queue pair before it returns.
func (t *Transport) startLinks(ctx context.Context, store transport.Store, token []byte) error {
	t.store, t.token = store, token
	t.attempts = make(map[int]*mesh.Attempt)
	t.linkedNote = make(chan struct{})
	t.life, t.endLife = context.WithCancel(context.Background())
	host := mesh.ListenHost(t.opts.ListenHost, store)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("listen on %s for queue pair exchanges: %w", host, err)
	}
	t.ln = ln
	t.door = mesh.NewDoor("rdma", t.rank)
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		t.door.Serve(t.life, ln, t.spawn, t.admit)
	}()
	if err := store.Put(ctx, t.key("cm", t.rank), []byte(ln.Addr().String())); err != nil {
		return fmt.Errorf("publish the connection manager's address: %w", err)
	}
	if !t.opts.Eager {
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, t.size)
	for r := range t.size {
		if r == t.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := t.link(ctx, r, "connect to")
			if err == nil {
				err = p.Failed()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopLinks stops queue pairs from being made or brought up, and waits
// for the dials and admissions in flight, which the end of t.life cuts
// short.
func (t *Transport) stopLinks() {
	t.linkMu.Lock()
	t.stopped = true
	t.linkMu.Unlock()
	if t.endLife != nil {
		t.endLife()
	}
	if t.ln != nil {
		t.ln.Close()
	}
	t.bg.Wait()
}

// adopt adds the peers made since the last pass to the engine's list.
// Called by the goroutine holding t.progress.
func (t *Transport) adopt() {
	t.list = append(t.list, t.arrivals.Take()...)
}

// queuePairs is how many queue pairs this rank has made: one per peer it
// talked to, or that talked to it.
func (t *Transport) queuePairs() int {
	t.makeMu.Lock()
	defer t.makeMu.Unlock()
	return t.made
}

// makePeer returns this rank's queue pair to r, making it first if there
// is none: the slabs mapped and registered, the queue pair created, in
// INIT, its receives posted, so that it needs only the peer's numbers.
func (t *Transport) makePeer(r int) (*peer, error) {
	if p := t.peers[r].Load(); p != nil {
		return p, nil
	}
	t.makeMu.Lock()
	defer t.makeMu.Unlock()
	if p := t.peers[r].Load(); p != nil {
		return p, nil
	}
	t.linkMu.Lock()
	stopped := t.stopped
	t.linkMu.Unlock()
	if stopped {
		return nil, transport.ErrClosed
	}
	if t.made >= t.maxPeers {
		return nil, fmt.Errorf("%w: rank %d has queue pairs to %d peers, as many as the completion queue of %s holds (%d entries)",
			ErrInvalid, t.rank, t.made, t.h.name, t.h.maxCQE)
	}
	if err := t.memlockCheck(t.made + 1); err != nil {
		return nil, err
	}
	o := t.opts
	p := &peer{
		t:        t,
		rank:     r,
		psn:      rand.Uint32() & 0xffffff,
		ready:    make(chan transport.Message, o.Slots),
		recvNote: make(chan struct{}, 1),
		sendNote: make(chan struct{}, 1),
		cr:       credits{avail: o.Slots, slots: o.Slots},
		stageWR:  make([]uint64, o.Slots),
		Fault:    mesh.NewFault(r),
		up:       make(chan struct{}),
	}
	if err := p.build(); err != nil {
		p.release()
		return nil, err
	}
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if t.stopped {
		p.release()
		return nil, transport.ErrClosed
	}
	t.peers[r].Store(p)
	t.made++
	t.arrivals.Add(p)
	return p, nil
}

// build maps and registers p's slabs and makes its queue pair, in INIT
// with its receives posted.
func (p *peer) build() error {
	t, h := p.t, p.t.h
	n := t.opts.Slots * t.opts.SlotSize
	var err error
	if p.slabMem, err = mmapSlab(n); err != nil {
		return err
	}
	if p.stageMem, err = mmapSlab(n); err != nil {
		return err
	}
	p.slab, p.stage = p.slabMem[:n:n], p.stageMem[:n:n]
	if p.slabMR, _, p.rkey, err = h.regMR(p.slab, true); err != nil {
		return err
	}
	if p.stageMR, p.sendLKey, _, err = h.regMR(p.stage, false); err != nil {
		return err
	}
	if p.qp, p.qpn, p.inline, p.sges, err = h.createQP(t.sqDepth, t.rqDepth, t.opts.MaxInline); err != nil {
		return err
	}
	p.inline = min(p.inline, t.opts.MaxInline)
	p.joined = make([]byte, p.inline)
	if err := h.qpInit(p.qp); err != nil {
		return err
	}
	// Receives are posted before the peer can possibly write.
	if err := h.postRecvs(p.qp, wrID(wrRecv, p.rank, 0), t.rqDepth); err != nil {
		return fmt.Errorf("%w: %v", ErrVerbs, err)
	}
	return nil
}

// record is what this rank tells p's rank in an exchange.
func (t *Transport) record(p *peer) *info {
	in := t.mine()
	in.qp = peerInfo{qpn: p.qpn, psn: p.psn, addr: uint64(uintptr(unsafe.Pointer(&p.slab[0]))), rkey: p.rkey}
	return in
}

// mine is this rank's record without a queue pair, to check the peers'
// against.
func (t *Transport) mine() *info {
	h := t.h
	return &info{rank: uint32(t.rank), size: uint32(t.size), slots: uint32(t.opts.Slots), slotSize: uint32(t.opts.SlotSize),
		namespace: nsHash(t.opts.Namespace), lid: h.lid, mtu: h.mtu, linkLayer: h.linkLayer, gid: h.gid}
}

// connectTo takes p's queue pair to RTR and RTS with the peer's numbers, the
// first time; later exchanges must carry the same numbers.
func (p *peer) connectTo(theirs *info) error {
	p.cm.Lock()
	defer p.cm.Unlock()
	if p.rtr {
		if theirs.qp != p.remote {
			return fmt.Errorf("rank %d offers another queue pair than before (did it restart?): %w", p.rank, ErrMismatch)
		}
		return nil
	}
	t, h := p.t, p.t.h
	if err := h.qpRTR(p.qp, min(h.mtu, theirs.mtu), theirs.qp.qpn, theirs.qp.psn, theirs.gid, theirs.lid, t.opts.GIDIndex); err != nil {
		return err
	}
	if err := h.qpRTS(p.qp, p.psn, t.opts); err != nil {
		return err
	}
	p.remoteAddr, p.remoteRKey = theirs.qp.addr, theirs.qp.rkey
	p.remote = theirs.qp
	p.rtr = true
	return nil
}

// link returns peer r once its queue pair is up or it failed, making the
// queue pair and dialing r if need be. A peer that cannot be reached (it
// died, gave up, or never published its address) is lost: the error
// wraps ErrPeerLost and names it.
func (t *Transport) link(ctx context.Context, r int, op string) (*peer, error) {
	p, err := t.makePeer(r)
	if err != nil {
		if errors.Is(err, transport.ErrClosed) {
			return nil, &transport.PeerError{Peer: r, Op: op, Err: err}
		}
		return nil, fmt.Errorf("rdma: %s rank %d: %w", op, r, err)
	}
	graceEnd := time.Now().Add(mesh.DialGrace)
	var grace *time.Timer
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		if p.isUp() || p.Failed() != nil {
			return p, nil
		}
		t.linkMu.Lock()
		if t.stopped {
			t.linkMu.Unlock()
			return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
		}
		a := t.attempts[r]
		if a == nil && r > t.rank {
			if wait := time.Until(graceEnd); wait > 0 {
				// r dials us: give it a moment to (see mesh.DialGrace).
				note := t.linkedNote
				t.linkMu.Unlock()
				if grace == nil {
					grace = time.NewTimer(wait)
				}
				select {
				case <-note:
				case <-grace.C:
				case <-p.up:
				case <-p.Dead():
				case <-ctx.Done():
					return nil, &transport.PeerError{Peer: r, Op: op, Err: ctx.Err()}
				case <-t.closed:
					return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
				}
				continue
			}
		}
		if a == nil {
			a = mesh.NewAttempt()
			t.attempts[r] = a
			a.Out++
			t.bg.Add(1)
			go t.dialPeer(p, a)
		}
		t.linkMu.Unlock()
		select {
		case <-a.Done():
		case <-p.up:
		case <-p.Dead():
		case <-ctx.Done():
			return nil, &transport.PeerError{Peer: r, Op: op, Err: ctx.Err()}
		case <-t.closed:
			return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
		}
	}
}

// linkLater brings up the queue pair to r in the background, for a call
// that must not wait; one such goroutine per peer at a time.
func (t *Transport) linkLater(r int) {
	p, err := t.makePeer(r)
	if err != nil || p.isUp() || p.Failed() != nil || !p.linking.CompareAndSwap(false, true) {
		return // a call that waits will say what failed
	}
	go func() {
		defer p.linking.Store(false)
		t.link(t.life, r, "send to")
	}()
}

// endAttempt records the end of one attempt on p (out or in), with err if
// it failed for a reason that makes p lost. The last attempt to end
// forgets a and wakes the calls waiting on it.
func (t *Transport) endAttempt(p *peer, a *mesh.Attempt, out bool, err error) {
	if err != nil && !p.isUp() && t.life.Err() == nil {
		p.fail(fmt.Errorf("%w: %w", transport.ErrPeerLost, err))
	}
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if a.End(out) && t.attempts[p.rank] == a {
		delete(t.attempts, p.rank)
	}
}

// linked wakes the calls waiting for p, which is up.
func (t *Transport) linked(p *peer) {
	p.markUp()
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if a := t.attempts[p.rank]; a != nil {
		a.Finish()
	}
	close(t.linkedNote)
	t.linkedNote = make(chan struct{})
}

// dialPeer runs one outgoing exchange with p's rank, in the background so
// that it outlives the call that needed it (another may need it too).
func (t *Transport) dialPeer(p *peer, a *mesh.Attempt) {
	defer t.bg.Done()
	declined, err := t.dial(t.life, p)
	if declined {
		// Its own dial is under way and is the one answered: wait for it.
		timer := time.NewTimer(t.opts.HandshakeTimeout)
		select {
		case <-p.up:
		case <-timer.C:
			// Its dial may have failed: the calls that wait dial again.
		case <-t.life.Done():
		}
		timer.Stop()
	}
	if err != nil && mesh.TimedOut(err) {
		// A peer too slow to answer in time (a host overloaded by its
		// ranks) is not lost: the calls that wait dial again, for as
		// long as their contexts let them. A dead peer refuses the
		// connection, or the store says it left.
		logging.L().Info("rdma: a queue pair exchange timed out; the calls that need it try again", "rank", t.rank, "peer", p.rank, "err", err)
		err = nil
	}
	t.endAttempt(p, a, true, err)
}

// The bytes of an exchange after the records.
const (
	verdictDecline = 0
	verdictAccept  = 1
	// verdictMismatch: the dialer's record disagrees with ours (options,
	// job size); our record follows, so that the dialer can say what.
	verdictMismatch = 2
	dialerReady     = 1
)

// dial exchanges numbers with p's rank as the dialing end. declined means
// that rank is dialing us at the same time and its connection is the one
// answered.
func (t *Transport) dial(ctx context.Context, p *peer) (declined bool, err error) {
	addr, err := t.store.Get(ctx, t.key("cm", p.rank))
	if err != nil {
		return false, fmt.Errorf("address of rank %d: %w", p.rank, err)
	}
	deadline := time.Now().Add(t.opts.HandshakeTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", string(addr))
	if err != nil {
		// The listener lives as long as the peer's transport: a refusal
		// means the peer is gone (died, gave up or closed).
		return false, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := auth.Handshake(c, t.token, auth.QueuePair, true, deadline); err != nil {
		return false, err
	}
	c.SetDeadline(deadline)
	if _, err := c.Write(t.record(p).marshal()); err != nil {
		return false, fmt.Errorf("send queue pair record: %w", err)
	}
	var v [1]byte
	if _, err := io.ReadFull(c, v[:]); err != nil {
		return false, fmt.Errorf("read verdict: %w", err)
	}
	switch v[0] {
	case verdictDecline:
		return true, nil
	case verdictAccept:
	case verdictMismatch:
		_, err := t.readRecord(c, p.rank)
		switch {
		case err == nil:
			err = fmt.Errorf("rank %d refused our queue pair record: %w", p.rank, ErrMismatch)
		case !errors.Is(err, ErrMismatch):
			err = fmt.Errorf("rank %d refused our queue pair record; reading why: %w", p.rank, err)
		}
		return false, err
	default:
		return false, fmt.Errorf("verdict %d: %w", v[0], errProtocol)
	}
	theirs, err := t.readRecord(c, p.rank)
	if err == nil {
		err = p.connectTo(theirs)
	}
	if err != nil {
		return false, err
	}
	// Its queue pair received before it answered, and ours does now. The
	// byte goes before linked lets our calls on: a Send that returns and a
	// Close right after it (which cuts this connection short) would
	// otherwise stop it, leaving the peer's end never up and its calls
	// dialing a rank that has gone. If it is lost all the same, our first
	// completion tells the peer just as well (see complete).
	c.Write([]byte{dialerReady})
	t.linked(p)
	return false, nil
}

// spawn runs an admission in the background, counted so that stopLinks
// waits for it, unless links stopped: then it reports false.
func (t *Transport) spawn(f func()) bool {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if t.stopped {
		return false
	}
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		f()
	}()
	return true
}

// admit runs the answering end of one exchange.
func (t *Transport) admit(c net.Conn) {
	defer c.Close()
	deadline := time.Now().Add(t.opts.HandshakeTimeout)
	stop := context.AfterFunc(t.life, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	theirs, err := t.hear(c, deadline)
	t.door.Release()
	if err != nil {
		if errors.Is(err, ErrMismatch) {
			// An authenticated rank of the job whose options differ:
			// tell it, with our record, so that it fails saying what.
			c.Write(append([]byte{verdictMismatch}, t.mine().marshal()...))
		}
		t.door.Refuse(t.life, c.RemoteAddr(), err)
		return
	}
	r := int(theirs.rank)
	// Answer unless both ends are dialing and ours, the higher rank's,
	// is the one to answer; or another exchange with r is answered now.
	t.linkMu.Lock()
	a := t.attempts[r]
	accept := !t.stopped && (a == nil || a.In == 0 && (a.Out == 0 || r > t.rank))
	if accept {
		if a == nil {
			a = mesh.NewAttempt()
			t.attempts[r] = a
		}
		a.In++
	}
	t.linkMu.Unlock()
	if !accept {
		c.Write([]byte{verdictDecline})
		return
	}
	p, err := t.makePeer(r)
	if err != nil {
		// Nothing was said: the dialer fails to read a verdict, and its
		// calls, and ours, look again.
		logging.L().Warn("rdma: cannot make a queue pair for a peer that dialed", "rank", t.rank, "peer", r, "err", err)
		t.linkMu.Lock()
		if a.End(false) && t.attempts[r] == a {
			delete(t.attempts, r)
		}
		t.linkMu.Unlock()
		return
	}
	// Our queue pair receives before the dialer learns its numbers.
	if err := p.connectTo(theirs); err != nil {
		t.endAttempt(p, a, false, err)
		return
	}
	answer := append([]byte{verdictAccept}, t.record(p).marshal()...)
	if _, err := c.Write(answer); err != nil {
		// A failed answer loses nobody: the dialer dials again, or is
		// gone, which a call of ours finds out when it dials.
		t.endAttempt(p, a, false, nil)
		return
	}
	var ok [1]byte
	if _, err := io.ReadFull(c, ok[:]); err == nil && ok[0] == dialerReady {
		t.linked(p)
	}
	t.endAttempt(p, a, false, nil)
}

// hear authenticates a dialer and reads and checks its record.
func (t *Transport) hear(c net.Conn, deadline time.Time) (*info, error) {
	if err := auth.Handshake(c, t.token, auth.QueuePair, false, deadline); err != nil {
		return nil, err
	}
	c.SetDeadline(deadline)
	return t.readRecord(c, -1)
}

// readRecord reads a peer's queue pair record from c and checks it
// against ours; want is the rank expected, or -1 for any rank of the job.
// A record that disagrees is returned with the ErrMismatch that says how.
func (t *Transport) readRecord(c net.Conn, want int) (*info, error) {
	b := make([]byte, infoLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, fmt.Errorf("read queue pair record: %w", err)
	}
	theirs, err := parseInfo(b)
	if err == nil {
		err = theirs.check(t.mine(), want)
	}
	return theirs, err
}
