//go:build unix

package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/gate"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/peercred"
	"github.com/gocoll/gocoll/transport"
)

// Links are made on demand: the first Send or Recv that needs a peer
// dials it (link), and every rank accepts, for as long as its transport
// is open, whoever dials it (admit). Either end of a pair may be the
// first to need the link, so either may dial: waiting for the other end
// to dial could deadlock a rank whose Send to a peer that is busy
// receiving from a third rank, itself waiting on the first. When both
// ends dial at once (the lower rank gives the higher one a moment first,
// see dialGrace), the connection the higher rank dialed wins: the
// lower rank declines the other, a decision each end takes under linkMu
// against what it is doing itself, so that exactly one connection per
// pair survives.
//
// internal/mesh.Links holds the same rules for shm. tcp keeps this copy
// because registering a link here also hands it to the engine's poll
// list (joining, wake) and its eager connect, warm links and loss list
// read these fields; moving it onto mesh.Links is a change of its own,
// to be checked against the engine's tests and benchmarks.

// dialGrace is how long a rank that needs a link to a higher rank waits
// for that rank to dial before it dials itself. Most first contacts are
// both ends of an exchange reaching for each other at once (recursive
// doubling, pairwise alltoall, a ring's two neighbours, a tree's parent
// and child): the higher rank dials at once, and the lower one, waiting
// a moment, spares the pair a second connection and handshake that would
// only be declined. Where the higher rank is busy elsewhere (a Send to a
// rank not yet receiving), the lower one dials after the grace: a first
// message late by this much, once per pair, and never a deadlock.
const dialGrace = 20 * time.Millisecond

// attempt is a link to one peer in the making: an outgoing dial, an
// incoming connection admitted, or both at once. Calls that need the
// peer wait on done, which closes once the link is up or every attempt
// has ended; then they look again.
type attempt struct {
	done    chan struct{}
	closed  bool
	out, in int // attempts of each kind in flight
}

func (a *attempt) finish() {
	if !a.closed {
		a.closed = true
		close(a.done)
	}
}

// link returns the peer r, connecting to it first if no link exists yet.
// A peer that cannot be reached (it died, gave up, or never published its
// address) is lost: the error wraps ErrPeerLost and names it.
func (t *Transport) link(ctx context.Context, r int, op string) (*peer, error) {
	if r < 0 || r >= len(t.peers) || r == t.rank {
		return nil, fmt.Errorf("tcp: %s: rank %d is not a peer of rank %d in a job of %d", op, r, t.rank, len(t.peers))
	}
	select {
	case <-t.closed:
		return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
	default:
	}
	if p := t.peers[r].Load(); p != nil {
		return p, nil
	}
	graceEnd := time.Now().Add(dialGrace)
	var grace *time.Timer
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		t.linkMu.Lock()
		if p := t.peers[r].Load(); p != nil {
			t.linkMu.Unlock()
			return p, nil
		}
		if t.shut {
			t.linkMu.Unlock()
			return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
		}
		if err := t.unreachable[r]; err != nil {
			t.linkMu.Unlock()
			return nil, &transport.PeerError{Peer: r, Op: op, Err: err}
		}
		a := t.attempts[r]
		if a == nil && r > t.rank {
			if wait := time.Until(graceEnd); wait > 0 {
				// r dials us: give it a moment to (see dialGrace).
				note := t.linkedNote
				t.linkMu.Unlock()
				if grace == nil {
					grace = time.NewTimer(wait)
				}
				select {
				case <-note:
				case <-grace.C:
				case <-ctx.Done():
					return nil, &transport.PeerError{Peer: r, Op: op, Err: ctx.Err()}
				case <-t.closed:
					return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
				}
				continue
			}
		}
		if a == nil {
			a = t.startDial(r)
		}
		t.linkMu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return nil, &transport.PeerError{Peer: r, Op: op, Err: ctx.Err()}
		case <-t.closed:
			return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
		}
	}
}

// startDial starts dialing r in the background, so that the dial
// outlives the call that needed it (another may need it too, and a
// cancelled call must not leave the pair half-connected). Called with
// linkMu held.
func (t *Transport) startDial(r int) *attempt {
	a := t.attempts[r]
	if a == nil {
		a = &attempt{done: make(chan struct{})}
		t.attempts[r] = a
	}
	a.out++
	t.bg.Add(1)
	go t.dialPeer(r, a)
	return a
}

// endAttempt records the end of one attempt on r (out or in), with err if
// it failed for a reason that makes r lost. The last attempt to end
// forgets a and wakes the calls waiting on it.
func (t *Transport) endAttempt(r int, a *attempt, out bool, err error) {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if out {
		a.out--
	} else {
		a.in--
	}
	if err != nil && t.peers[r].Load() == nil && !t.shut && t.unreachable[r] == nil {
		t.unreachable[r] = err
		t.noteLinkLoss(r, err)
	}
	if a.out == 0 && a.in == 0 {
		if t.attempts[r] == a {
			delete(t.attempts, r)
		}
		a.finish()
	}
}

// dialPeer runs one outgoing attempt on r: fetch its address, connect,
// authenticate, and register the link, unless r declines because its own
// dial to us is under way (its connection then wins, and we wait for it).
func (t *Transport) dialPeer(r int, a *attempt) {
	defer t.bg.Done()
	p, declined, err := t.dial(t.life, r)
	if err == nil && !declined {
		err = t.register(p)
		if err != nil {
			p.closeFd()
			err = nil // only Close or Abort refuse a registration
		}
	}
	if declined {
		timer := time.NewTimer(t.opts.HandshakeTimeout)
		select {
		case <-a.done: // its connection arrived (register finished a)
		case <-timer.C:
			// Its dial may have timed out at its end (see below): the
			// calls that wait dial again.
		case <-t.life.Done():
		}
		timer.Stop()
	}
	if err != nil && t.life.Err() != nil {
		err = nil // Close or Abort cut it short: not a loss
	}
	if err != nil && timedOut(err) {
		// A peer too slow to finish a handshake in time (a host
		// overloaded by its ranks) is not lost: the calls that wait
		// dial again, for as long as their contexts let them. A dead
		// peer refuses the connection, or the store says it left.
		logging.L().Info("tcp: a link timed out; the calls that need it try again", "rank", t.rank, "peer", r, "err", err)
		err = nil
	}
	t.endAttempt(r, a, true, err)
}

// dial connects to r and says who we are. declined means r is dialing
// us at the same time and its connection is the one to keep.
func (t *Transport) dial(ctx context.Context, r int) (p *peer, declined bool, err error) {
	t.addrGets.Add(1)
	addr, err := t.store.Get(ctx, t.key(r))
	if err != nil {
		return nil, false, fmt.Errorf("%w: address of rank %d: %w", transport.ErrPeerLost, r, err)
	}
	dctx, cancel := context.WithTimeout(ctx, t.opts.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", string(addr))
	if err != nil {
		// The listener lives as long as the peer's transport: a refusal
		// means the peer is gone (died, gave up or closed).
		return nil, false, fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
	}
	tc := c.(*net.TCPConn)
	_, keys, err := t.handshake(dctx, tc, true, r)
	if err != nil {
		c.Close()
		return nil, false, fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
	}
	verdict, err := t.readVerdict(dctx, tc)
	if err != nil {
		c.Close()
		return nil, false, fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
	}
	if !verdict {
		c.Close()
		return nil, true, nil
	}
	p, err = t.newPeer(r, tc, keys)
	if err != nil {
		c.Close()
		return nil, false, err
	}
	return p, false, nil
}

// timedOut says whether err is a deadline's: the handshake's, or the
// connect's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// The one byte an accepting end answers after the hellos.
const (
	verdictDecline = 0
	verdictAccept  = 1
)

func (t *Transport) readVerdict(ctx context.Context, c *net.TCPConn) (bool, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetDeadline(time.Now().Add(t.opts.HandshakeTimeout))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false, fmt.Errorf("read verdict: %w", err)
	}
	c.SetDeadline(time.Time{})
	switch b[0] {
	case verdictAccept:
		return true, nil
	case verdictDecline:
		return false, nil
	}
	return false, fmt.Errorf("verdict %d: %w", b[0], errProtocol)
}

// register makes p the link to its rank and hands it to the engine.
func (t *Transport) register(p *peer) error {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	if t.shut {
		return transport.ErrClosed
	}
	if t.peers[p.rank].Load() != nil {
		return fmt.Errorf("rank %d is linked already", p.rank)
	}
	t.peers[p.rank].Store(p)
	t.linked++
	t.joining = append(t.joining, p)
	t.newcomers.Store(true)
	if a := t.attempts[p.rank]; a != nil {
		a.finish()
	}
	if t.linkedNote != nil {
		close(t.linkedNote)
		t.linkedNote = make(chan struct{})
	}
	if t.wakefd >= 0 {
		// A blocking poll in flight does not watch p yet.
		t.wake()
	}
	return nil
}

// acceptLoop admits whoever dials, until the listener closes. Each
// handshake runs on its own, so a stranger that stalls cannot hold up the
// ranks behind it; at most gate.Max authenticate at once (the rest wait in
// the backlog); strangers are refused, counted and logged in summary.
func (t *Transport) acceptLoop(ln net.Listener) {
	defer t.bg.Done()
	g := gate.New("tcp", gate.Max, gate.Every, logging.L(), "rank", t.rank)
	defer g.Close()
	for {
		if !g.Acquire(t.life) {
			return
		}
		c, err := ln.Accept()
		if err != nil {
			g.Release()
			if errors.Is(err, net.ErrClosed) || t.life.Err() != nil {
				return
			}
			// Transient (descriptors ran out): back off, keep serving.
			logging.L().Warn("tcp: accept", "rank", t.rank, "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-t.life.Done():
				return
			}
			continue
		}
		t.linkMu.Lock()
		if t.shut {
			t.linkMu.Unlock()
			g.Release()
			c.Close()
			return
		}
		t.bg.Add(1)
		t.linkMu.Unlock()
		go t.admit(c.(*net.TCPConn), g)
	}
}

// admit runs the accepting end of one connection, holding a slot of g
// until the peer has authenticated or been refused.
func (t *Transport) admit(c *net.TCPConn, g *gate.Gate) {
	defer t.bg.Done()
	var r int
	var keys *linkKeys
	var err error
	if len(t.token) == 0 {
		// No token: on this host, only this user's processes.
		err = peercred.Check(c)
	}
	if err == nil {
		r, keys, err = t.handshake(t.life, c, false, -1)
	}
	g.Release()
	if err != nil {
		c.Close()
		if t.life.Err() == nil {
			t.refused.Add(1)
			g.Refuse(c.RemoteAddr(), err)
		}
		return
	}
	// Decide: keep this connection unless the pair is linked already or
	// both ends are dialing and ours, the higher rank's, wins.
	t.linkMu.Lock()
	a := t.attempts[r]
	accept := !t.shut && t.peers[r].Load() == nil && (a == nil || a.in == 0 && (a.out == 0 || r > t.rank))
	if accept {
		if a == nil {
			a = &attempt{done: make(chan struct{})}
			t.attempts[r] = a
		}
		a.in++
	}
	t.linkMu.Unlock()
	verdict := []byte{verdictDecline}
	if accept {
		verdict[0] = verdictAccept
	}
	c.SetDeadline(time.Now().Add(t.opts.HandshakeTimeout))
	_, werr := c.Write(verdict)
	c.SetDeadline(time.Time{})
	if !accept {
		c.Close()
		return
	}
	var p *peer
	if werr == nil {
		p, werr = t.newPeer(r, c, keys)
	}
	if werr == nil {
		if t.register(p) != nil {
			p.closeFd()
		}
	} else {
		c.Close()
	}
	// A failed admission loses nobody: the calls waiting on r look again
	// and dial themselves.
	t.endAttempt(r, a, false, nil)
}

// handshake authenticates c, exchanges hellos and checks the peer's. want
// is the rank expected, or -1 on the accepting end. It returns the
// peer's rank and, with Options.Encrypt, the link's keys.
func (t *Transport) handshake(ctx context.Context, c *net.TCPConn, dialer bool, want int) (int, *linkKeys, error) {
	deadline := time.Now().Add(t.opts.HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	session, err := auth.HandshakeKey(c, t.token, auth.Mesh, dialer, deadline)
	if err != nil {
		return 0, nil, err
	}
	c.SetDeadline(deadline)
	salt, err := newSalt()
	if err != nil {
		return 0, nil, fmt.Errorf("hello salt: %w", err)
	}
	mine := t.hello(salt).marshal()
	if _, err := c.Write(mine); err != nil {
		return 0, nil, fmt.Errorf("send hello: %w", err)
	}
	buf := make([]byte, helloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return 0, nil, fmt.Errorf("read hello: %w", err)
	}
	h, err := parseHello(buf)
	if err != nil {
		return 0, nil, err
	}
	if err := t.check(h, want); err != nil {
		return 0, nil, err
	}
	var keys *linkKeys
	if t.opts.Encrypt {
		dialerHello, listenerHello := mine, buf
		if !dialer {
			dialerHello, listenerHello = buf, mine
		}
		// From the handshake's session key, fresh for this connection
		// and never on the wire: a captured link stays sealed even if
		// the token leaks later, or was guessable.
		if keys, err = deriveKeys(session[:], dialerHello, listenerHello, t.rank, int(h.rank)); err != nil {
			return 0, nil, err
		}
	}
	if !stop() && ctx.Err() != nil {
		return 0, nil, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	return int(h.rank), keys, nil
}

// connect publishes this rank's address and, with Options.Eager, builds
// every link at once: every rank dials the lower ranks and waits for the
// higher ones, all at once, so that the job connects in the time of its
// slowest link; the listener then closes. Without Eager nothing more
// happens here: links come as calls need them.
func (t *Transport) connect(ctx context.Context, store transport.Store, token []byte) error {
	t.store, t.token = store, token
	t.life, t.endLife = context.WithCancel(context.Background())
	host := mesh.ListenHost(t.opts.ListenHost, t.store)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("tcp: listen on %s: %w", host, err)
	}
	t.ln = ln
	t.bg.Add(1)
	go t.acceptLoop(ln)
	if err := t.store.Put(ctx, t.key(t.rank), []byte(ln.Addr().String())); err != nil {
		return fmt.Errorf("tcp: publish address: %w", err)
	}
	if !t.opts.Eager {
		return t.warm(ctx)
	}
	t.linkMu.Lock()
	for r := 0; r < t.rank; r++ {
		t.startDial(r)
	}
	t.linkMu.Unlock()
	for {
		t.linkMu.Lock()
		linked, note := t.linked, t.linkedNote
		var failed error
		for r, err := range t.unreachable {
			failed = &transport.PeerError{Peer: r, Op: "connect", Err: err}
			break
		}
		t.linkMu.Unlock()
		if failed != nil {
			return fmt.Errorf("tcp: building the mesh: %w", failed)
		}
		if linked == t.size-1 {
			break
		}
		select {
		case <-note:
		case <-t.lostCh():
		case <-ctx.Done():
			return fmt.Errorf("tcp: building the mesh: %w", ctx.Err())
		}
	}
	// The door shuts once the mesh is built.
	ln.Close()
	return nil
}

// warm links the peers of Options.Warm, all at once, so that the
// calls that need them first find them ready and a peer that cannot be
// reached fails Connect.
func (t *Transport) warm(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(t.opts.Warm))
	for i, r := range t.opts.Warm {
		if r == t.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = t.link(ctx, r, "connect to")
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("tcp: warming the links: %w", err)
		}
	}
	return nil
}

// lostCh is closed on the first loss, which for an eager Connect is a
// dial that failed.
func (t *Transport) lostCh() <-chan struct{} { return t.lost }

// noteLinkLoss records r as lost for want of a link: the dial failed.
// Called with linkMu held.
func (t *Transport) noteLinkLoss(r int, err error) {
	select {
	case <-t.closed:
		return
	default:
	}
	t.lostMu.Lock()
	t.losses = append(t.losses, &transport.PeerError{Peer: r, Op: "connect to", Err: err})
	t.lostMu.Unlock()
	t.lostOnce.Do(func() { close(t.lost) })
}

// shutLinks stops links from forming: no more dials or admissions, the
// listener closed, dials and handshakes in flight cut short. Close waits
// for them; Abort does not.
func (t *Transport) shutLinks() {
	t.linkMu.Lock()
	t.shut = true
	t.linkMu.Unlock()
	if t.endLife != nil {
		t.endLife()
	}
	if t.ln != nil {
		t.ln.Close()
	}
}

// adopt adds the links registered since the last pass to the engine's
// poll list. Called by the goroutine holding t.progress.
func (t *Transport) adopt() {
	if !t.newcomers.Load() {
		return
	}
	t.linkMu.Lock()
	add := t.joining
	t.joining = nil
	t.newcomers.Store(false)
	t.linkMu.Unlock()
	t.list = append(t.list, add...)
	if len(t.pfds) < len(t.list)+1 {
		t.pfds = make([]unix.PollFd, len(t.list)+1, 2*len(t.list)+1)
	}
	t.pfds = t.pfds[:len(t.list)+1]
}

// Links is how many peers this rank is connected to now.
func (t *Transport) Links() int {
	t.linkMu.Lock()
	defer t.linkMu.Unlock()
	return t.linked
}

// AddressLookups is how many peer addresses this rank has fetched from
// the store: one per peer it dialed.
func (t *Transport) AddressLookups() int { return int(t.addrGets.Load()) }
