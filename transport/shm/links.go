//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/peercred"
	"github.com/gocoll/gocoll/transport"
)

// Links are made on demand, by the rules of mesh.Links: the first Send or
// Recv that needs a peer dials it (link), and every rank accepts, for as
// long as its transport is open, whoever dials it (admit). Either end may
// dial first; when both do at once, the higher rank's connection wins
// and the lower rank declines the other before any ring is made, so
// exactly one pair of rings per pair of ranks exists.

// dialGrace is mesh.Links' Grace: how long a rank that needs a higher
// rank waits for it to dial first. A variable so that a test can make
// both ends of a pair dial at once.
var dialGrace = mesh.DialGrace

// listen opens this rank's abstract socket, publishes its name once and
// starts admitting peers. An abstract socket has no file to clean up and,
// like the memfds, vanishes with the process: a peer that died refuses
// the dial, which is how a rank never contacted is found lost.
func (t *Transport) listen(ctx context.Context) error {
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("shm: socket name: %w", err)
	}
	name := "@gocoll-shm-" + hex.EncodeToString(nonce[:])
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return fmt.Errorf("shm: listen on %s: %w", name, err)
	}
	t.ln = ln
	t.door = mesh.NewDoor("shm", t.rank)
	return t.links.Open(ctx, "shm", ln, t.door, t.admit, t.store, t.key(t.rank), name, t.opts.Eager)
}

// link returns peer r, linking it first if need be. A peer that cannot be
// reached (it died, gave up, or is not on this host) is lost: the error
// wraps ErrPeerLost and names it. Out of line: only a first contact
// comes here.
//
//go:noinline
func (t *Transport) link(ctx context.Context, r int, op string) (*peer, error) {
	if r < 0 || r >= t.size || r == t.rank {
		return nil, t.notPeer(r, op)
	}
	if t.closing.Load() {
		return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
	}
	return t.links.Reach(ctx, r, op)
}

// dial reaches r and shakes hands; declined means r's own dial to us wins.
func (t *Transport) dial(ctx context.Context, r int) (*peer, bool, error) {
	c, err := mesh.Dial(ctx, t.store, t.key(r), r, "unix", t.opts.HandshakeTimeout)
	if oe := (*net.OpError)(nil); errors.As(err, &oe) && !errors.Is(err, syscall.EAGAIN) {
		// Refused: no such socket here. (EAGAIN, the peer's accept
		// queue full with a crowd dialing it at once, is transient.)
		err = fmt.Errorf("%w (is rank %d on this host?)", err, r)
	}
	if err != nil {
		return nil, false, err
	}
	uc := c.(*net.UnixConn)
	if err := peercred.Check(uc); err != nil { // a socket another user squats
		uc.Close()
		return nil, false, fmt.Errorf("%w: rank %d's socket %s: %w", transport.ErrPeerLost, r, uc.RemoteAddr(), err)
	}
	p, declined, err := t.handshake(ctx, uc, r)
	if err != nil || declined {
		uc.Close()
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
	}
	return p, declined, nil
}

// transient says a failed dial may be tried again: the handshake timed
// out (a host overloaded by its ranks), or the peer's accept queue was
// full. A dead peer refuses the connection instead.
func transient(err error) bool {
	return mesh.TimedOut(err) || errors.Is(err, syscall.EAGAIN)
}

// admit runs the accepting end of one connection, holding a slot of the
// door until it ends; strangers are refused, counted and logged.
func (t *Transport) admit(nc net.Conn) {
	defer t.door.Release()
	c := nc.(*net.UnixConn)
	ctx, cancel := context.WithTimeout(t.links.Life(), t.opts.HandshakeTimeout)
	defer cancel()
	// A job's ranks on one host run as one user: another user's
	// process is refused before it is told anything (SO_PEERCRED).
	err := peercred.Check(c)
	var p *peer
	if err == nil {
		p, _, err = t.handshake(ctx, c, -1)
	}
	if err != nil {
		c.Close()
		t.door.Refuse(t.links.Life(), nil, err)
	}
	if p == nil && err == nil {
		c.Close() // declined: the pair is linked, or our own dial wins
	}
}

// The one byte the accepting end answers after the hellos.
const (
	verdictDecline = 'N'
	verdictAccept  = 'Y'
)

// handshake authenticates the peer, checks it is part of this job with
// the same options, settles which connection of the pair to keep, and
// swaps rings: each side creates the ring it receives on and passes its
// descriptor to the other. want is the rank dialed, or -1 on the
// accepting end, which registers the peer itself (mesh.Links.Admitted);
// the dialing end's link is registered by mesh.Links. declined means the
// connection is not kept and no ring was made.
func (t *Transport) handshake(ctx context.Context, c *net.UnixConn, want int) (p *peer, declined bool, err error) {
	deadline, stop := mesh.Bound(ctx, c, t.opts.HandshakeTimeout)
	defer stop()
	dialer := want >= 0
	if err := auth.Handshake(c, t.token, auth.Mesh, dialer, deadline); err != nil {
		return nil, false, err
	}
	c.SetDeadline(deadline)
	if _, err := c.Write(t.hello().marshal()); err != nil {
		return nil, false, fmt.Errorf("send hello: %w", err)
	}
	buf := make([]byte, helloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, false, fmt.Errorf("read hello: %w", err)
	}
	h, err := parseHello(buf)
	if err != nil {
		return nil, false, err
	}
	if err := t.check(h, want); err != nil {
		return nil, false, err
	}
	r := int(h.Rank)
	var v [1]byte
	if dialer {
		if _, err := io.ReadFull(c, v[:]); err != nil {
			return nil, false, fmt.Errorf("read verdict: %w", err)
		}
		switch v[0] {
		case verdictDecline:
			return nil, true, nil
		case verdictAccept:
		default:
			return nil, false, fmt.Errorf("verdict %#x: %w", v[0], errProtocol)
		}
	} else {
		v[0] = verdictDecline
		admitted := t.links.Admit(r)
		if admitted {
			v[0] = verdictAccept
			// Whatever happens below, the admission ends here.
			defer func() { t.links.Admitted(r, p) }()
		}
		if _, err := c.Write(v[:]); err != nil {
			return nil, false, fmt.Errorf("send verdict: %w", err)
		}
		if !admitted {
			return nil, true, nil
		}
	}
	p = &peer{t: t, rank: r, pid: int(h.pid), local: int(h.pid) == os.Getpid(), conn: c, sender: storeSender{mode: t.opts.NonTemporal.Here()}, Fault: mesh.NewFault(r)}
	fd, in, err := createRing(t.opts.Slots, t.opts.SlotSize)
	if err != nil {
		return nil, false, err
	}
	p.in = in
	_, _, err = c.WriteMsgUnix([]byte{'R'}, unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		p.in.unmap()
		return nil, false, fmt.Errorf("pass the ring: %w", err)
	}
	out, err := t.receiveRing(c)
	if err != nil {
		p.in.unmap()
		return nil, false, err
	}
	p.out = out
	if !stop() && ctx.Err() != nil {
		p.in.unmap()
		p.out.unmap()
		return nil, false, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	return p, false, nil
}

// linked starts watching p, now the link to its rank. Called by
// mesh.Links under its lock, never after the transport began to close:
// the rings are unmapped only once every watcher ended.
func (t *Transport) linked(_ int, p *peer) {
	t.readers.Add(1)
	go p.watch()
}

// unreachable records r, never linked, as lost: its dial failed.
func (t *Transport) unreachable(r int, err error) {
	t.loss.Report(r, "connect to", err)
}
