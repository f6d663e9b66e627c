package mesh

import (
	"context"

	"github.com/gocoll/gocoll/transport"
)

// Await is the wait of a transport whose progress engine one waiting call
// drives at a time (tcp, rdma), the token being a send on progress (of
// capacity one). Until ready() or failed() holds it takes the token when
// free and runs drive, or else waits for note or dead (something came for
// this call, or its peer was lost), for ctx to end or for closed to close
// (then transport.ErrClosed). The token is tried first on its own: it is
// nearly always free, and the full select's locking was 2% of a small
// allreduce over TCP.
func Await(ctx context.Context, progress chan struct{}, closed, note, dead <-chan struct{}, ready, failed func() bool, drive func() error) error {
	for !ready() && !failed() {
		took := false
		select {
		case progress <- struct{}{}:
			took = true
		default:
			select {
			case progress <- struct{}{}:
				took = true
			case <-note:
			case <-dead:
			case <-ctx.Done():
				return ctx.Err()
			case <-closed:
				return transport.ErrClosed
			}
		}
		if took {
			err := drive()
			<-progress
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Ended says why a wait must stop: ctx's error once ctx ended, or
// transport.ErrClosed once closed is closed; nil while both go on.
func Ended(ctx context.Context, closed <-chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-closed:
		return transport.ErrClosed
	default:
		return nil
	}
}
