//go:build !unix

package tcp

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"

	"github.com/gocoll/gocoll/transport"
)

// The engine (engine.go) drives raw non-blocking sockets with poll(2),
// on Linux and the other Unix systems. Here (Windows, and the likes of
// Plan 9 and WebAssembly) there is none: Connect builds a job of one rank,
// which has no peers and needs no socket, and refuses any larger job
// before it listens or dials, with an error wrapping ErrUnsupported.

var errNoEngine = fmt.Errorf("%w: its engine needs Unix (non-blocking sockets and poll(2)); this is %s, where only a job of one rank connects",
	ErrUnsupported, runtime.GOOS)

// Transport is the TCP mesh of one rank; on this system, a job of one
// rank.
type Transport struct {
	rank, size int
	opts       Options
	peers      []*peer
	wakefd     int

	progress  chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	lost      chan struct{}
}

// newTransport is a transport with no peers, which is all a job of one
// rank needs.
func newTransport(rank, size int, opts Options) *Transport {
	return &Transport{rank: rank, size: size, opts: opts, peers: make([]*peer, size), wakefd: -1,
		progress: make(chan struct{}, 1), closed: make(chan struct{}), lost: make(chan struct{})}
}

func (t *Transport) connect(ctx context.Context, store transport.Store, token []byte) error {
	return errNoEngine
}

// peer stands in for a connected peer, which this system never has.
type peer struct{ rank int }

func (t *Transport) newPeer(r int, c *net.TCPConn, _ *linkKeys) (*peer, error) {
	return nil, errNoEngine
}

func (t *Transport) start() error { return errNoEngine }

func (p *peer) closeFd() {}

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// MaxMessage implements transport.Transport.
func (t *Transport) MaxMessage() int { return t.opts.SlotSize }

func (t *Transport) noPeer(op string, r int) error {
	return fmt.Errorf("tcp: %s: rank %d is not a peer of rank %d in a job of %d", op, r, t.rank, t.size)
}

// Recv implements transport.Transport.
func (t *Transport) Recv(ctx context.Context, from int) (transport.Message, error) {
	return transport.Message{}, t.noPeer("recv from", from)
}

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, to int, b []byte) error {
	return t.noPeer("send to", to)
}

// HasCredit implements transport.CreditReporter.
func (t *Transport) HasCredit(to int) bool { return true }

// Release implements transport.Transport.
func (t *Transport) Release(m transport.Message) {}

// Lost implements transport.LossNotifier.
func (t *Transport) Lost() <-chan struct{} { return t.lost }

// LostErr implements transport.LossNotifier.
func (t *Transport) LostErr() error { return nil }

// Close implements transport.Transport.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() { close(t.closed) })
	return nil
}

// Abort implements transport.Aborter.
func (t *Transport) Abort(cause error) error { return t.Close() }

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.LossNotifier = (*Transport)(nil)
)
