package mesh

import (
	"sync"
	"sync/atomic"

	"github.com/gocoll/gocoll/transport"
)

// Fault is how a link to one peer failed, once: the first cause wins.
// Every transport's peer embeds one (tcp's socket, shm's rings, rdma's
// queue pair); what fails a link, and what else a failure wakes, is the
// transport's own. Make it with NewFault.
type Fault struct {
	peer int
	once sync.Once
	gone atomic.Bool // set, after err, when dead closes: cheap to poll
	dead chan struct{}
	err  error // set before gone and dead
}

// NewFault returns the fault record of the link to peer, not failed.
func NewFault(peer int) Fault { return Fault{peer: peer, dead: make(chan struct{})} }

// Fail marks the link failed with cause err, unless it failed already,
// and reports whether this was the first cause. The loss is reported to
// loss (nil: to no one) before anyone waiting on Dead wakes, so that a
// call woken by it, on another goroutine, finds the loss announced.
func (f *Fault) Fail(err error, loss *Loss) (first bool) {
	f.once.Do(func() {
		f.err = err
		loss.Note(f.peer, err)
		f.gone.Store(true)
		close(f.dead)
		first = true
	})
	return first
}

// Failed is the link's cause of failure, or nil while it is healthy.
// Small enough to inline: every message's path asks it.
func (f *Fault) Failed() error {
	if f.gone.Load() {
		return f.err
	}
	return nil
}

// Dead is closed when the link fails.
func (f *Fault) Dead() <-chan struct{} { return f.dead }

// Error is the failure as a call doing op on the link reports it: a
// *transport.PeerError naming the peer.
func (f *Fault) Error(op string) error {
	return &transport.PeerError{Peer: f.peer, Op: op, Err: f.err}
}

// Receive is the Recv of a transport that queues each peer's messages,
// as they arrive, on a channel of their own (ready): it returns the next
// one, waiting through await (which returns once its argument holds, the
// link failed, or with an error) while there is none. The messages a peer
// delivered before its link failed come first.
func Receive(ready <-chan transport.Message, f *Fault, await func(ready func() bool) error) (transport.Message, error) {
	for {
		select {
		case m := <-ready:
			return m, nil
		default:
		}
		if f.Failed() != nil {
			select {
			case m := <-ready:
				return m, nil
			default:
			}
			return transport.Message{}, f.Error("recv from")
		}
		if err := await(func() bool { return len(ready) > 0 }); err != nil {
			return transport.Message{}, &transport.PeerError{Peer: f.peer, Op: "recv from", Err: err}
		}
	}
}
