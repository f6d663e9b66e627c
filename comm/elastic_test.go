package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// elasticSetups are the transports an elastic job must survive a death on.
var elasticSetups = []struct {
	name      string
	opts      []comm.Option
	fakeHosts string
}{
	{"tcp", []comm.Option{comm.WithTransport("tcp")}, ""},
	{"shm", []comm.Option{comm.WithTransport("shm")}, ""},
	{"shm+tcp", nil, "2"},
}

// TestShrinkAfterDeath: in an elastic job of 4 ranks, rank 2 dies while
// the others run an allreduce. Their call fails naming it (ErrPeerLost);
// each calls Shrink, and all three get a communicator of the same three
// survivors, ranked 0, 1, 2 in their old order, over the connections they
// had (no new ones), whose collectives, sub-communicators and tagged
// messages give the right results. The old communicator stays broken.
func TestShrinkAfterDeath(t *testing.T) {
	for _, setup := range elasticSetups {
		t.Run(setup.name, func(t *testing.T) {
			if setup.fakeHosts != "" {
				t.Setenv("GOCOLL_FAKE_HOSTS", setup.fakeHosts)
			}
			opts := append([]comm.Option{comm.WithElastic(true), comm.WithTimeout(20 * time.Second)}, setup.opts...)
			cs := local(t, 4, opts...)
			const victim = 2
			var died time.Time
			shrunk := make([]*comm.Communicator, len(cs))
			took := make([]time.Duration, len(cs))
			// The victim dies once the others are out of the allreduce
			// before the death: a death seen while a survivor is still
			// in it would fail that call too, rightly.
			var before sync.WaitGroup
			before.Add(len(cs) - 1)
			errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				r := c.Rank()
				v := []float64{float64(r)}
				err := comm.AllReduce(ctx, c, v, comm.Sum)
				if r != victim {
					before.Done()
				}
				if err != nil || v[0] != 6 {
					return fmt.Errorf("allreduce before the death: %v, %v", v, err)
				}
				if r == victim {
					before.Wait()
					time.Sleep(20 * time.Millisecond)
					died = time.Now()
					comm.Die(c)
					return nil
				}
				err = comm.AllReduce(ctx, c, make([]float32, 1<<18), comm.Sum)
				if !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), "rank 2") {
					return fmt.Errorf("allreduce during the death = %v; want ErrPeerLost naming rank 2", err)
				}
				nc, err := c.Shrink(ctx)
				if err != nil {
					return fmt.Errorf("shrink: %w", err)
				}
				shrunk[r] = nc
				v = []float64{float64(r)}
				if err := comm.AllReduce(ctx, nc, v, comm.Sum); err != nil {
					return fmt.Errorf("first allreduce after the shrink: %w", err)
				}
				took[r] = time.Since(died)
				if v[0] != 4 { // 0 + 1 + 3
					return fmt.Errorf("allreduce after the shrink = %v, want 4", v[0])
				}
				if want := map[int]int{0: 0, 1: 1, 3: 2}[r]; nc.Rank() != want || nc.Size() != 3 {
					return fmt.Errorf("shrunk to rank %d of %d, want %d of 3", nc.Rank(), nc.Size(), want)
				}
				b := make([]int32, 1000)
				if nc.Rank() == 2 {
					for i := range b {
						b[i] = int32(i)
					}
				}
				if err := comm.Broadcast(ctx, nc, b, 2); err != nil || b[999] != 999 {
					return fmt.Errorf("broadcast after the shrink: %v (b[999] = %d)", err, b[999])
				}
				sub, err := nc.Split(ctx, nc.Rank()%2, 0)
				if err != nil {
					return fmt.Errorf("split after the shrink: %w", err)
				}
				w := []int64{1}
				if err := comm.AllReduce(ctx, sub, w, comm.Sum); err != nil || w[0] != int64(sub.Size()) {
					return fmt.Errorf("allreduce on a split of the shrunk communicator: %v, %v", w, err)
				}
				if err := sub.Close(); err != nil {
					return err
				}
				if err := c.Barrier(ctx); !errors.Is(err, comm.ErrBroken) {
					return fmt.Errorf("the old communicator after the shrink: %v, want ErrBroken", err)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			for r, nc := range shrunk {
				if nc != nil {
					t.Logf("rank %d: death to first allreduce on the shrunk communicator: %v", r, took[r].Round(time.Millisecond))
					if took[r] > time.Second {
						t.Errorf("rank %d: %v from the death to the first allreduce after the shrink, want under 1s", r, took[r])
					}
				}
			}
			closeAll(t, shrunk)
		})
	}
}

// TestShrinkAfterAbort: Abort on an elastic communicator ends it on every
// rank (the others' calls fail naming the rank and its reason), but no
// rank is lost: all four call Shrink and get a communicator of all four.
func TestShrinkAfterAbort(t *testing.T) {
	cs := local(t, 4, comm.WithElastic(true), comm.WithTransport("tcp"), comm.WithTimeout(20*time.Second))
	reason := errors.New("loss went NaN")
	shrunk := make([]*comm.Communicator, len(cs))
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		r := c.Rank()
		var err error
		if r == 1 {
			time.Sleep(20 * time.Millisecond)
			c.Abort(reason)
			err = c.Barrier(ctx)
			if !errors.Is(err, comm.ErrAborted) {
				return fmt.Errorf("barrier after Abort = %v, want ErrAborted", err)
			}
		} else {
			err = comm.AllReduce(ctx, c, make([]float32, 1000), comm.Sum)
			if !errors.Is(err, comm.ErrPeerLost) || !strings.Contains(err.Error(), reason.Error()) {
				return fmt.Errorf("allreduce while rank 1 aborts = %v; want ErrPeerLost with its reason", err)
			}
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrink: %w", err)
		}
		shrunk[r] = nc
		if nc.Size() != 4 || nc.Rank() != r {
			return fmt.Errorf("shrunk to rank %d of %d, want %d of 4", nc.Rank(), nc.Size(), r)
		}
		v := []int32{int32(r)}
		if err := comm.AllReduce(ctx, nc, v, comm.Sum); err != nil || v[0] != 6 {
			return fmt.Errorf("allreduce after the shrink: %v, %v", v, err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	closeAll(t, shrunk)
}

// TestShrinkMistakes: Shrink refuses a job that is not elastic and a
// communicator shrunk before (ErrInvalid), and, when a live rank never
// calls it, gives up at the deadline naming that rank (ErrTimeout).
func TestShrinkMistakes(t *testing.T) {
	t.Run("not elastic", func(t *testing.T) {
		cs := local(t, 2)
		if _, err := cs[0].Shrink(context.Background()); !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "GOCOLL_ELASTIC") {
			t.Fatalf("Shrink on a job that is not elastic = %v, want ErrInvalid saying how to make it elastic", err)
		}
	})
	t.Run("absent rank, then twice", func(t *testing.T) {
		cs := local(t, 3, comm.WithElastic(true), comm.WithTimeout(20*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := cs[0].Shrink(ctx)
		if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "rank 1, rank 2 neither called Shrink") {
			t.Fatalf("Shrink while ranks 1 and 2 never call it = %v; want ErrTimeout naming them", err)
		}
		if _, err := cs[0].Shrink(context.Background()); !errors.Is(err, comm.ErrInvalid) {
			t.Fatalf("a second Shrink = %v, want ErrInvalid", err)
		}
	})
}

// closeAll closes the communicators that are not nil, all at once, as
// separate processes would: each Close waits a little for its peers'
// goodbyes.
func closeAll(t *testing.T, cs []*comm.Communicator) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Close(); err != nil {
				t.Errorf("rank %d: Close: %v", c.Rank(), err)
			}
		}()
	}
	wg.Wait()
}
