package comm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestSubAbort: aborting a sub-communicator ends that communicator alone,
// as ncclCommAbort on a split communicator does: the parent, running an
// allreduce meanwhile, completes it and the next one with the right
// results on every rank; the other members' calls on the sub-communicator
// fail within moments with ErrPeerLost naming the aborting rank and its
// reason, and later ones with ErrBroken; the aborting rank's with
// ErrAborted.
func TestSubAbort(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			cs := local(t, 3, comm.WithTransport(tr), comm.WithTimeout(30*time.Second))
			subs := make([]*comm.Communicator, len(cs))
			mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				sub, err := c.Split(ctx, 0, c.Rank())
				subs[c.Rank()] = sub
				return err
			})
			reason := errors.New("the loader for this group failed")
			start := time.Now()
			var mu sync.Mutex
			subErr := make([]error, len(cs))
			subTook := make([]time.Duration, len(cs))
			parent := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				r := c.Rank()
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					if r == 1 {
						time.Sleep(30 * time.Millisecond)
						subs[1].Abort(reason)
						err = comm.AllReduce(ctx, subs[1], []float32{1}, comm.Sum)
					} else {
						err = comm.AllReduce(ctx, subs[r], make([]float32, 1000), comm.Sum)
					}
					mu.Lock()
					subErr[r], subTook[r] = err, time.Since(start)
					mu.Unlock()
				}()
				defer wg.Wait()
				for i := range 2 {
					v := []float64{float64(r + i)}
					if err := comm.AllReduce(ctx, c, v, comm.Sum); err != nil {
						return err
					}
					if want := float64(3 + 3*i); v[0] != want {
						t.Errorf("rank %d: parent allreduce %d = %v, want %v", r, i, v[0], want)
					}
				}
				return nil
			})
			for r := range cs {
				t.Logf("rank %d: parent %v; sub after %v: %v", r, parent[r], subTook[r].Round(time.Millisecond), subErr[r])
				if parent[r] != nil || cs[r].Err() != nil {
					t.Errorf("rank %d: the parent failed: %v, Err() = %v", r, parent[r], cs[r].Err())
				}
				switch {
				case r == 1 && !errors.Is(subErr[r], comm.ErrAborted):
					t.Errorf("rank 1: sub call after its Abort: %v, want ErrAborted", subErr[r])
				case r != 1 && (!errors.Is(subErr[r], comm.ErrPeerLost) || !strings.Contains(subErr[r].Error(), "rank 1") || !strings.Contains(subErr[r].Error(), reason.Error())):
					t.Errorf("rank %d: sub call: %v, want ErrPeerLost naming rank 1 and the reason", r, subErr[r])
				}
				if subTook[r] > 2*time.Second {
					t.Errorf("rank %d: the sub call took %v to fail", r, subTook[r])
				}
			}
			if err := comm.AllReduce(context.Background(), subs[0], []float32{1}, comm.Sum); !errors.Is(err, comm.ErrBroken) {
				t.Errorf("rank 0: a later sub call: %v, want ErrBroken", err)
			}
			mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error { return c.Barrier(ctx) })
		})
	}
}
