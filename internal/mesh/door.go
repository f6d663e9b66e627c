package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/internal/gate"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/transport"
)

// Door is the accepting side of a transport's links: the loop that
// admits whoever dials the rank's listener, the bound on connections
// authenticating at once (internal/gate), and the count and log of the
// connections refused (strangers, wrong tokens, other communicators).
// Every transport has one; what it does with a connection (handshake,
// hellos, verdict, rings or queue pairs) is its own.
type Door struct {
	what    string // the listener, as log lines name it: "tcp", "shm", "rdma"
	rank    int
	gate    *gate.Gate
	refused atomic.Int64
}

// NewDoor returns the door of rank's listener, named what in its logs.
func NewDoor(what string, rank int) *Door {
	return &Door{what: what, rank: rank, gate: gate.New(what, gate.Max, gate.Every, logging.L(), "rank", rank)}
}

// Serve admits whoever dials ln, until ln closes or life ends. Each
// connection's admission runs on its own through spawn (which counts it,
// and reports false once the transport is shutting: the connection is
// then closed and the loop ends), so a stranger that stalls cannot hold
// up the ranks behind it. At most gate.Max connections authenticate at
// once, the rest waiting in the kernel's backlog: admit must call
// Release exactly once, when its peer has authenticated or been refused.
func (d *Door) Serve(life context.Context, ln net.Listener, spawn func(func()) bool, admit func(net.Conn)) {
	defer d.gate.Close()
	for {
		if !d.gate.Acquire(life) {
			return
		}
		c, err := ln.Accept()
		if err != nil {
			d.gate.Release()
			if errors.Is(err, net.ErrClosed) || life.Err() != nil {
				return
			}
			// Transient (descriptors ran out): back off, keep serving.
			logging.L().Warn(d.what+": accept", "rank", d.rank, "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-life.Done():
				return
			}
			continue
		}
		if !spawn(func() { admit(c) }) {
			d.gate.Release()
			c.Close()
			return
		}
	}
}

// Release gives back the slot a connection held while it authenticated.
func (d *Door) Release() { d.gate.Release() }

// Refuse counts and logs a connection refused before or during its
// handshake, unless life ended (a handshake cut short by Close is no
// refusal).
func (d *Door) Refuse(life context.Context, remote net.Addr, err error) {
	if life.Err() != nil {
		return
	}
	d.refused.Add(1)
	d.gate.Refuse(remote, err)
}

// Refused is how many connections the door refused; none for a door
// never opened (nil).
func (d *Door) Refused() int {
	if d == nil {
		return 0
	}
	return int(d.refused.Load())
}

// TimedOut says whether err is a deadline's: a handshake's or a
// connect's. A dial that timed out finds a peer too slow to answer in
// time (a host overloaded by its ranks), not a lost one: a dead peer
// refuses the connection, or the store says it left.
func TimedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// Address fetches rank r's address, published under key, from store. A
// rank whose address the store cannot give (it left the job, or never
// joined it) is lost: the error wraps transport.ErrPeerLost.
func Address(ctx context.Context, store transport.Store, key string, r int) (string, error) {
	addr, err := store.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("%w: address of rank %d: %w", transport.ErrPeerLost, r, err)
	}
	return string(addr), nil
}

// Dial connects, over network ("tcp", "unix"), to rank r at the address
// it published under key in store (see Address), the connect bounded by
// timeout; the handshake that follows bounds itself (Bound). The listener
// lives as long as the peer's transport, so a refusal means the peer is
// gone (died, gave up or closed): a failed connect wraps
// transport.ErrPeerLost, and the transport's Transient says which of
// them may be tried again.
func Dial(ctx context.Context, store transport.Store, key string, r int, network string, timeout time.Duration) (net.Conn, error) {
	addr, err := Address(ctx, store, key, r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
	}
	return c, nil
}

// Bound bounds a handshake on c: its deadline is timeout from now, or
// ctx's deadline if that comes first, and c's deadline is cut short when
// ctx ends meanwhile. stop ends the watch on ctx; false means ctx ended
// first.
func Bound(ctx context.Context, c net.Conn, timeout time.Duration) (deadline time.Time, stop func() bool) {
	deadline = time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline, context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}
