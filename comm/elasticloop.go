package comm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Elastic runs the loop every elastic training program writes: run a
// step; when a rank is lost, Shrink and bring the survivors to one state;
// when replacements wait, Grow and bring them up to date; stop when the
// program says so. The program supplies the step and how to agree on its
// state; Run does the rest.
//
//	loop := comm.Elastic{
//		Step: func(ctx context.Context, c *comm.Communicator, step int) (bool, error) {
//			// this rank's share of the batch (by c.Rank() of c.Size()),
//			// the gradient allreduce on c, the update
//			return step+1 == steps, err
//		},
//		Resync: func(ctx context.Context, c *comm.Communicator, step int) (int, error) {
//			// every rank takes rank 0's parameters and step, and
//			// reshards its data for c.Size() ranks
//			err := comm.Broadcast(ctx, c, params, 0)
//			...
//			return step, comm.BroadcastValue(ctx, c, &step, 0)
//		},
//	}
//	c, step, err := loop.Run(ctx, c, 0)
//
// A job that is not elastic runs the same loop and never shrinks or
// grows: a lost rank's error is returned.
type Elastic struct {
	// Step runs step number step on c, every collective of the step on
	// c (and on nothing else that a Shrink would not replace). done says
	// this rank wants the loop to end after this step; it ends when any
	// rank says so. An error that wraps ErrPeerLost or ErrBroken makes
	// the survivors shrink and run the step again from the state Resync
	// agrees on; any other error ends Run. If a rank is lost just after
	// the step that said done, Step is called again with the next
	// step: it should say done again without working (step >= steps).
	Step func(ctx context.Context, c *Communicator, step int) (done bool, err error)
	// Resync makes every rank of c hold the same state, whatever the
	// failed step left (typically: broadcast the parameters, the step
	// and the optimizer state from rank 0; a replacement has no state
	// before it), and reshards for c.Size() ranks. It returns the step
	// to go on from: rank 0's, which it was given as step (Run counts a
	// step as soon as Step returns, so step is the number of steps rank
	// 0's state holds). Run calls it
	// on every rank of a communicator Shrink or Grow made, and on a
	// replacement (c.Joined()) before its first step.
	Resync func(ctx context.Context, c *Communicator, step int) (int, error)
	// Event, if set, learns what the loop did, for the program's log.
	Event func(ElasticEvent)
}

// ElasticEvent is a change Elastic.Run made.
type ElasticEvent struct {
	// Kind is "lost" (a step or a resync failed with err; a Shrink
	// follows), "shrank", "grew" or "joined" (this process, a
	// replacement, took the state of the job it joined).
	Kind string
	Err  error // for "lost": the failure
	Comm *Communicator
	Step int           // the step the ranks go on from
	Took time.Duration // the Shrink or Grow and the Resync after it
}

// lostPeer reports whether err is a failure the survivors can shrink
// away: a peer lost, or the communicator broken by a failure elsewhere.
func lostPeer(err error) bool {
	return errors.Is(err, ErrPeerLost) || errors.Is(err, ErrBroken)
}

// Run runs the loop from step on c until a step on some rank says it is
// done, and returns the communicator the ranks ended on (close it, not c,
// at the end: it owns the job's connections), and the number of steps
// done. After each step the ranks agree, in one small allreduce, on
// whether any is done and whether replacements wait (Pending); all then
// grow, or stop, together.
func (e Elastic) Run(ctx context.Context, c *Communicator, step int) (*Communicator, int, error) {
	if c == nil {
		return nil, step, errNil("elastic")
	}
	if e.Step == nil || e.Resync == nil {
		return c, step, fmt.Errorf("comm: elastic: Step and Resync are both needed: %w", ErrInvalid)
	}
	event := func(ev ElasticEvent) {
		if e.Event != nil {
			e.Event(ev)
		}
	}
	var err error
	if c.Joined() {
		if step, err = e.Resync(ctx, c, step); err != nil {
			return c, step, fmt.Errorf("comm: elastic: taking the job's state: %w", err)
		}
		event(ElasticEvent{Kind: "joined", Comm: c, Step: step})
	}
	for {
		var done bool
		done, err = e.Step(ctx, c, step)
		if err == nil {
			// Counted at once: if the agreement below fails, this
			// rank's state is a step on, and so is its count, which
			// Resync hands on if this rank is the new rank 0.
			step++
			pending, quit := c.Pending(), 0
			if done {
				quit = 1
			}
			err = AllReduceValues(ctx, c, Max, &pending, &quit)
			if err == nil {
				if quit > 0 {
					return c, step, nil
				}
				if pending > 0 {
					t0 := time.Now()
					nc, gerr := c.Grow(ctx)
					if gerr != nil {
						return c, step, fmt.Errorf("comm: elastic: grow after step %d: %w", step, gerr)
					}
					if nc != c {
						c = nc
						var at int
						if at, err = e.Resync(ctx, c, step); err == nil {
							step = at
							event(ElasticEvent{Kind: "grew", Comm: c, Step: step, Took: time.Since(t0)})
						}
					}
				}
			}
		}
		// Another rank may die during the Shrink or just after it: try
		// again until the survivors agree on the state.
		for err != nil && lostPeer(err) && c.elastic {
			event(ElasticEvent{Kind: "lost", Err: err, Comm: c, Step: step})
			t0 := time.Now()
			nc, serr := c.Shrink(ctx)
			if serr != nil {
				return c, step, fmt.Errorf("comm: elastic: step %d failed (%v), and shrinking failed: %w", step, err, serr)
			}
			c = nc
			var at int
			if at, err = e.Resync(ctx, c, step); err == nil {
				step = at
				event(ElasticEvent{Kind: "shrank", Comm: c, Step: step, Took: time.Since(t0)})
			}
		}
		if err != nil {
			return c, step, err
		}
	}
}
