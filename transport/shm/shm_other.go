//go:build !linux

package shm

import (
	"context"
	"fmt"
	"runtime"

	"github.com/gocoll/gocoll/transport"
)

// The transport is built on Linux's sealed memfds and futexes (shm.go,
// ring_linux.go). Elsewhere the package still compiles, so that programs
// importing gocoll build on any system, but it connects nothing: Connect
// and Probe return errNotLinux, and comm's "auto" picks the network
// instead.

var errNotLinux = fmt.Errorf("%w: it needs Linux (memfd, futex); this is %s", ErrUnsupported, runtime.GOOS)

// Probe reports whether this system can run the shared-memory transport:
// here it cannot, and the error, wrapping ErrUnsupported, says why.
func Probe() error { return errNotLinux }

// Transport is the shared-memory mesh of one rank. None can be built on
// this system: Connect always fails.
type Transport struct{}

// Connect checks opts and fails with an error wrapping ErrUnsupported:
// the transport needs Linux.
func Connect(ctx context.Context, store transport.Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return 0 }

// Size implements transport.Transport.
func (t *Transport) Size() int { return 0 }

// MaxMessage implements transport.Transport.
func (t *Transport) MaxMessage() int { return 0 }

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, to int, b []byte) error {
	return &transport.PeerError{Peer: to, Op: "send to", Err: errNotLinux}
}

// SendParts implements transport.PartSender.
func (t *Transport) SendParts(ctx context.Context, to int, head, body []byte, wait bool) (bool, error) {
	return false, &transport.PeerError{Peer: to, Op: "send to", Err: errNotLinux}
}

// HasCredit implements transport.CreditReporter.
func (t *Transport) HasCredit(to int) bool { return true }

// Recv implements transport.Transport.
func (t *Transport) Recv(ctx context.Context, from int) (transport.Message, error) {
	return transport.Message{}, &transport.PeerError{Peer: from, Op: "recv from", Err: errNotLinux}
}

// Release implements transport.Transport.
func (t *Transport) Release(m transport.Message) {}

// Lost implements transport.LossNotifier: never closed.
func (t *Transport) Lost() <-chan struct{} { return nil }

// LostErr implements transport.LossNotifier.
func (t *Transport) LostErr() error { return nil }

// Close implements transport.Transport.
func (t *Transport) Close() error { return nil }

// Abort implements transport.Aborter.
func (t *Transport) Abort(cause error) error { return nil }

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.LossNotifier = (*Transport)(nil)
)
