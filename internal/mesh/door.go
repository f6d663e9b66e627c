package mesh

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/internal/gate"
	"github.com/gocoll/gocoll/internal/logging"
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
