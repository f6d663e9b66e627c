//go:build unix

package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/peercred"
	"github.com/gocoll/gocoll/transport"
)

// Links are made on demand by the link core, mesh.Links: the first Send
// or Recv that needs a peer dials it (link), and every rank accepts, for
// as long as its transport is open, whoever dials it (admit, served by a
// mesh.Door). Either end may dial first; when both do at once, the
// higher rank's connection wins and the lower rank declines the other
// with a verdict byte after the hellos, so that exactly one connection
// per pair survives. What is tcp's own: the dial and the handshake
// (token, hellos, keys), and registering a link, which hands it to the
// engine's poll list (linked, adopt).

// newLinks is the link core of a transport of slots ranks, none linked.
func (t *Transport) newLinks(slots int) *mesh.Links[peer] {
	return mesh.NewLinks(t.rank, slots, mesh.LinkConfig[peer]{
		Dial:        t.dial,
		Transient:   t.transient,
		Linked:      t.linked,
		Unreachable: t.unreachable,
		Discard:     (*peer).closeFd,
		DeclineWait: t.opts.HandshakeTimeout,
	})
}

// link returns the peer r, connecting to it first if no link exists yet.
// A peer that cannot be reached (it died, gave up, or never published its
// address) is lost: the error wraps ErrPeerLost and names it.
func (t *Transport) link(ctx context.Context, r int, op string) (*peer, error) {
	if r < 0 || r >= t.Capacity() || r == t.rank {
		return nil, fmt.Errorf("tcp: %s: rank %d is not a peer of rank %d in a job of %d", op, r, t.rank, t.Capacity())
	}
	select {
	case <-t.closed:
		return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
	default:
	}
	return t.links.Reach(ctx, r, op)
}

// transient says a failed dial may be tried again: a peer too slow to
// finish a handshake in time (a host overloaded by its ranks) is not
// lost, and the calls that wait dial again, for as long as their
// contexts let them.
func (t *Transport) transient(err error) bool {
	if !mesh.TimedOut(err) {
		return false
	}
	logging.L().Info("tcp: a link timed out; the calls that need it try again", "rank", t.rank, "err", err)
	return true
}

// dial connects to r and says who we are. declined means r is dialing
// us at the same time and its connection is the one to keep.
func (t *Transport) dial(ctx context.Context, r int) (p *peer, declined bool, err error) {
	c, err := mesh.Dial(ctx, t.store, t.key(r), r, "tcp", t.opts.HandshakeTimeout)
	if err != nil {
		return nil, false, err
	}
	tc := c.(*net.TCPConn)
	_, keys, err := t.handshake(ctx, tc, true, r)
	if err != nil {
		c.Close()
		return nil, false, fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
	}
	verdict, err := t.readVerdict(ctx, tc)
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

// linked hands p, now the link to its rank, to the engine: the next
// pass of the progress holder adds it to the poll list. Called by the
// link core under its lock.
func (t *Transport) linked(_ int, p *peer) {
	t.arrivals.Add(p)
	if t.wakefd >= 0 {
		// A blocking poll in flight does not watch p yet.
		t.wake()
	}
}

// admit runs the accepting end of one connection, holding a slot of the
// door until the peer has authenticated or been refused.
func (t *Transport) admit(nc net.Conn) {
	c := nc.(*net.TCPConn)
	life := t.links.Life()
	var r int
	var keys *linkKeys
	var err error
	if len(t.token) == 0 {
		// No token: on this host, only this user's processes.
		err = peercred.Check(c)
	}
	if err == nil {
		r, keys, err = t.handshake(life, c, false, -1)
	}
	t.door.Release()
	if err != nil {
		c.Close()
		t.door.Refuse(life, c.RemoteAddr(), err)
		return
	}
	accept := t.links.Admit(r)
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
	if werr != nil {
		c.Close()
		p = nil
	}
	// A failed admission loses nobody: the calls waiting on r look again
	// and dial themselves.
	t.links.Admitted(r, p)
}

// handshake authenticates c, exchanges hellos and checks the peer's. want
// is the rank expected, or -1 on the accepting end. It returns the
// peer's rank and, with Options.Encrypt, the link's keys.
func (t *Transport) handshake(ctx context.Context, c *net.TCPConn, dialer bool, want int) (int, *linkKeys, error) {
	deadline, stop := mesh.Bound(ctx, c, t.opts.HandshakeTimeout)
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
		if keys, err = deriveKeys(session[:], dialerHello, listenerHello, t.rank, int(h.Rank)); err != nil {
			return 0, nil, err
		}
	}
	if !stop() && ctx.Err() != nil {
		return 0, nil, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	return int(h.Rank), keys, nil
}

// connect publishes this rank's address and, with Options.Eager, builds
// every link at once: every rank dials the lower ranks and waits for the
// higher ones, all at once, so that the job connects in the time of its
// slowest link; the listener then closes. Without Eager it links only
// the peers of Options.Warm: the others come as calls need them.
func (t *Transport) connect(ctx context.Context, store transport.Store, token []byte) error {
	t.store, t.token = store, token
	host := mesh.ListenHost(t.opts.ListenHost, t.store)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("tcp: listen on %s: %w", host, err)
	}
	t.ln = ln
	t.door = mesh.NewDoor("tcp", t.rank)
	if err := t.links.Open(ctx, "tcp", ln, t.door, t.admit, store, t.key(t.rank), ln.Addr().String(), t.opts.Eager); err != nil {
		return err
	}
	if !t.opts.Eager {
		return t.warm(ctx)
	}
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

// unreachable records r as lost for want of a link: the dial failed.
// Called by the link core under its lock.
func (t *Transport) unreachable(r int, err error) {
	t.loss.Report(r, "connect to", err)
}

// shutLinks stops links from forming: no more dials or admissions, the
// listener closed, dials and handshakes in flight cut short. Close waits
// for them (t.links.Wait); Abort does not.
func (t *Transport) shutLinks() {
	t.links.Shut()
	if t.ln != nil {
		t.ln.Close()
	}
}

// adopt adds the links registered since the last pass to the engine's
// poll list. Called by the goroutine holding t.progress.
func (t *Transport) adopt() {
	add := t.arrivals.Take()
	if add == nil {
		return
	}
	t.list = append(t.list, add...)
	if len(t.pfds) < len(t.list)+1 {
		t.pfds = make([]unix.PollFd, len(t.list)+1, 2*len(t.list)+1)
	}
	t.pfds = t.pfds[:len(t.list)+1]
}
