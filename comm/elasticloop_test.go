package comm_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

var errDied = errors.New("this rank died, as the test told it to")

// TestElasticRun: four ranks of an elastic job run 20 steps through
// Elastic.Run; rank 2 dies at step 7. The three survivors shrink, resync
// from the new rank 0 and finish all 20 steps on 3 ranks, with the same
// state, each having seen one shrink. The step is redone, not skipped:
// the state counts the steps applied.
func TestElasticRun(t *testing.T) {
	cs := local(t, 4, comm.WithElastic(true), comm.WithTimeout(20*time.Second))
	const steps, victim, dieAt = 20, 2, 7
	type end struct {
		c      *comm.Communicator
		step   int
		state  [2]float64 // steps applied, sum of the ranks' contributions
		events []string
	}
	ends := make([]end, len(cs))
	var mu sync.Mutex
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		me := c.Rank()
		var state [2]float64
		loop := comm.Elastic{
			Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
				if step >= steps {
					return true, nil
				}
				if me == victim && step == dieAt {
					comm.Die(c)
					return false, errDied
				}
				g := []float64{1}
				if err := comm.AllReduce(ctx, c, g, comm.Sum); err != nil {
					return false, err
				}
				state[0]++
				state[1] += g[0]
				return step+1 == steps, nil
			},
			Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) {
				if err := comm.BroadcastValue(ctx, c, &state, 0); err != nil {
					return 0, err
				}
				return step, comm.BroadcastValue(ctx, c, &step, 0)
			},
			Event: func(ev comm.ElasticEvent) {
				mu.Lock()
				defer mu.Unlock()
				ends[me].events = append(ends[me].events, ev.Kind)
				if ev.Kind == "lost" && !errors.Is(ev.Err, comm.ErrPeerLost) && !errors.Is(ev.Err, comm.ErrBroken) {
					t.Errorf("rank %d: lost with %v", me, ev.Err)
				}
			},
		}
		nc, step, err := loop.Run(ctx, c, 0)
		mu.Lock()
		ends[me].c, ends[me].step, ends[me].state = nc, step, state
		mu.Unlock()
		return err
	})
	if !errors.Is(errs[victim], errDied) {
		t.Errorf("victim: %v, want its own error back", errs[victim])
	}
	for r, e := range ends {
		if r == victim {
			continue
		}
		if errs[r] != nil {
			t.Errorf("rank %d: %v", r, errs[r])
			continue
		}
		// 7 steps on 4 ranks, 13 on 3.
		want := [2]float64{steps, dieAt*4 + (steps-dieAt)*3}
		if e.step != steps || e.state != want || e.c.Size() != 3 {
			t.Errorf("rank %d: step %d, state %v on %d ranks; want step %d, state %v on 3", r, e.step, e.state, e.c.Size(), steps, want)
		}
		if len(e.events) != 2 || e.events[0] != "lost" || e.events[1] != "shrank" {
			t.Errorf("rank %d: events %v, want [lost shrank]", r, e.events)
		}
	}
	var shrunk []*comm.Communicator
	for r, e := range ends {
		if r != victim && e.c != nil {
			shrunk = append(shrunk, e.c)
		}
	}
	closeAll(t, shrunk)
}

// TestElasticRunStops: the loop ends, on every rank at the same step,
// when one rank's step says done; a job that is not elastic returns a
// lost peer's error as it is; Step and Resync are required.
func TestElasticRunStops(t *testing.T) {
	cs := local(t, 3)
	steps := make([]int, len(cs))
	mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		loop := comm.Elastic{
			Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
				return c.Rank() == 1 && step == 4, c.Barrier(ctx)
			},
			Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) {
				t.Errorf("rank %d: Resync called in a job that never changed", c.Rank())
				return step, nil
			},
		}
		nc, step, err := loop.Run(ctx, c, 0)
		if nc != c {
			t.Errorf("rank %d: the communicator changed", c.Rank())
		}
		steps[c.Rank()] = step
		return err
	})
	for r, s := range steps {
		if s != 5 {
			t.Errorf("rank %d stopped after %d steps, want 5", r, s)
		}
	}
	c := local(t, 1)[0]
	if _, _, err := (comm.Elastic{}).Run(context.Background(), c, 0); !errors.Is(err, comm.ErrInvalid) {
		t.Errorf("no Step: %v, want ErrInvalid", err)
	}

	cs = local(t, 2, comm.WithTimeout(10*time.Second))
	errs := each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		loop := comm.Elastic{
			Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
				if c.Rank() == 1 && step == 2 {
					comm.Die(c)
					return false, errDied
				}
				return false, c.Barrier(ctx)
			},
			Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) { return step, nil },
		}
		_, _, err := loop.Run(ctx, c, 0)
		return err
	})
	if !errors.Is(errs[0], comm.ErrPeerLost) {
		t.Errorf("not elastic: survivor's error %v, want ErrPeerLost", errs[0])
	}
}
