package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestCancelMidCall: a rank whose context is cancelled while it waits
// inside a collective returns context.Canceled naming the call, its
// communicator is broken (it may have sent part of its share), and the
// peers inside the same call fail within moments naming it, on every
// transport. A context cancelled before the call starts sends nothing,
// but breaks the communicator just the same, as the others wait in vain.
func TestCancelMidCall(t *testing.T) {
	layouts := []struct {
		name string
		opts []comm.Option
	}{
		{"tcp", []comm.Option{comm.WithTransport("tcp")}},
		{"shm", []comm.Option{comm.WithTransport("shm")}},
		{"shm+tcp", []comm.Option{comm.WithFakeHosts(2)}},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			opts := append(l.opts, comm.WithTimeout(30*time.Second))
			// Cancelled before it starts: nothing is sent, but the others
			// wait in that call; they are told.
			cs := local(t, 3, opts...)
			dead, cancel := context.WithCancel(context.Background())
			cancel()
			before := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				if c.Rank() == 1 {
					ctx = dead
				}
				return comm.AllReduce(ctx, c, []float32{1}, comm.Sum)
			})
			if !errors.Is(before[1], context.Canceled) || !errors.Is(cs[1].Err(), comm.ErrBroken) {
				t.Errorf("rank 1, cancelled before it started: %v, then Err() = %v; want context.Canceled, then ErrBroken", before[1], cs[1].Err())
			}
			for _, r := range []int{0, 2} {
				if !errors.Is(before[r], comm.ErrPeerLost) || !strings.Contains(before[r].Error(), "rank 1 gave up") {
					t.Errorf("rank %d: %v, want ErrPeerLost saying rank 1 gave the call up", r, before[r])
				}
			}

			cs = local(t, 3, opts...)

			// Cancelled while it waits for rank 2, which comes late: once
			// ranks 0 and 1 have returned, so that on a loaded machine too
			// rank 1's call cannot complete before the cancel lands, nor
			// rank 2's with rank 0 before rank 0 hears of it (over shm+tcp
			// rank 1 has handed its share to rank 0 by then).
			start := time.Now()
			took := make([]time.Duration, len(cs))
			back := []chan struct{}{make(chan struct{}), make(chan struct{})}
			errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				defer func() { took[c.Rank()] = time.Since(start) }()
				switch c.Rank() {
				case 0:
					defer close(back[0])
				case 1:
					defer close(back[1])
					cctx, cancel := context.WithCancel(ctx)
					time.AfterFunc(50*time.Millisecond, cancel)
					return comm.AllReduce(cctx, c, make([]float32, 1000), comm.Sum)
				case 2:
					<-back[0]
					<-back[1]
				}
				return comm.AllReduce(ctx, c, make([]float32, 1000), comm.Sum)
			})
			for r, err := range errs {
				t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
			}
			if err := errs[1]; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "allreduce #") {
				t.Errorf("rank 1: %v, want context.Canceled naming the call", errs[1])
			}
			if err := cs[1].Err(); !errors.Is(err, comm.ErrBroken) {
				t.Errorf("rank 1: Err() = %v after a call cancelled part-way, want ErrBroken", err)
			}
			for _, r := range []int{0, 2} {
				if !errors.Is(errs[r], comm.ErrPeerLost) || !strings.Contains(errs[r].Error(), "rank 1") {
					t.Errorf("rank %d: %v, want ErrPeerLost naming rank 1", r, errs[r])
				}
			}
			if took[0]-took[1] > 2*time.Second || took[2]-took[0] > 2*time.Second {
				t.Errorf("peers took %v and %v to fail (rank 1's call returned after %v)", took[0], took[2], took[1])
			}
		})
	}
}
