package mesh

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gocoll/gocoll/transport"
)

// Loss is a transport's record of the peers it lost, for
// transport.LossNotifier: every loss reported while the transport is
// open, first noticed first, and a channel closed at the first. Failures
// once the transport closes (Stop) are no losses: the peers are saying
// goodbye. The zero value is not ready: use NewLoss.
type Loss struct {
	ch      chan struct{}
	once    sync.Once
	grace   time.Duration
	mu      sync.Mutex
	stopped bool
	losses  transport.Losses
}

// NewLoss returns a record with no loss in it. A link's failure (Note)
// is announced grace after it happened: shm's calls on the peer fail at
// once, but the communicator above breaks as soon as Lost fires, and a
// peer that quit on a mismatch left its header in the ring, for this
// rank to read and report first.
func NewLoss(grace time.Duration) *Loss { return &Loss{ch: make(chan struct{}), grace: grace} }

// Report records that peer was lost while doing op (err wraps
// transport.ErrPeerLost); the first report closes Lost. After Stop it
// records nothing.
func (l *Loss) Report(peer int, op string, err error) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.losses = append(l.losses, &transport.PeerError{Peer: peer, Op: op, Err: err})
	l.mu.Unlock()
	l.once.Do(func() { close(l.ch) })
}

// Note records the failure of the link to peer with err, a loss unless
// the peer closed in good order (transport.ErrPeerClosed: it may simply
// have finished first). A nil record notes nothing.
func (l *Loss) Note(peer int, err error) {
	if l == nil || errors.Is(err, transport.ErrPeerClosed) {
		return
	}
	if l.grace <= 0 {
		l.Report(peer, "link to", err)
		return
	}
	time.AfterFunc(l.grace, func() { l.Report(peer, "link to", err) })
}

// Stop ends the record: the transport is closing.
func (l *Loss) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

// Lost is closed at the first loss.
func (l *Loss) Lost() <-chan struct{} { return l.ch }

// LostErr is nil until the first loss, then the *transport.PeerError of
// the one peer lost, or transport.Losses listing each.
func (l *Loss) LostErr() error {
	select {
	case <-l.ch:
	default:
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.losses) == 1 {
		return l.losses[0]
	}
	return slices.Clone(l.losses)
}
