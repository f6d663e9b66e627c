package mesh

import (
	"slices"
	"sync"

	"github.com/gocoll/gocoll/transport"
)

// Loss is a transport's record of the peers it lost, for
// transport.LossNotifier: every loss reported while the transport is
// open, first noticed first, and a channel closed at the first. The zero
// value is not ready: use NewLoss.
type Loss struct {
	ch     chan struct{}
	once   sync.Once
	mu     sync.Mutex
	losses transport.Losses
}

// NewLoss returns a record with no loss in it.
func NewLoss() *Loss { return &Loss{ch: make(chan struct{})} }

// Report records that peer was lost while doing op (err wraps
// transport.ErrPeerLost); the first report closes Lost.
func (l *Loss) Report(peer int, op string, err error) {
	l.mu.Lock()
	l.losses = append(l.losses, &transport.PeerError{Peer: peer, Op: op, Err: err})
	l.mu.Unlock()
	l.once.Do(func() { close(l.ch) })
}

// Lost is closed at the first loss.
func (l *Loss) Lost() <-chan struct{} { return l.ch }

// Err is nil until the first loss, then the *transport.PeerError of the
// one peer lost, or transport.Losses listing each.
func (l *Loss) Err() error {
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
