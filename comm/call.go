package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/gocoll/gocoll/collectives"
)

// run admits one collective at a time and turns the outcome into the
// communicator's state: a failure part-way leaves the ranks out of step, so
// it breaks the communicator for good.
func (c *Communicator) run(ctx context.Context, what string, f func(context.Context) error) error {
	if c == nil {
		return errNil(what)
	}
	if ctx == nil {
		ctx = context.Background()
		f = func(context.Context) error {
			return errNilContext(what)
		}
	}
	tk, mine := c.issue()
	if !mine {
		return c.runAt(ctx, tk, mine, what, f)
	}
	// The usual blocking call, whose turn has come: runAt without its
	// frame and its closure, on every small collective's path.
	// The ticket of a blocking call has no then, so the error need not
	// reach pass, and the turn still moves on whatever happens in f.
	defer c.pass(tk, true, nil)
	return c.runTurn(ctx, tk, what, f)
}

// admit waits for the collectives issued before tk to be done.
func (c *Communicator) admit(ctx context.Context, tk ticket, what string) error {
	if c.turns.waitTurn(ctx, tk, c.closed, c.aborted) {
		return nil
	}
	if err := c.unusable(); err != nil {
		return fmt.Errorf("%s: %s: %w", c.names().Prefix(), what, err)
	}
	return fmt.Errorf("%s: %s given up while waiting for the previous collective: %w (when its turn comes, the other ranks are told and the communicator breaks)",
		c.names().Prefix(), what, ctx.Err())
}

// runAt is run for the collective issued with ticket tk: unless its turn
// had come when it was issued (mine), it waits for the collectives issued
// before it on this rank (see async.go).
func (c *Communicator) runAt(ctx context.Context, tk ticket, mine bool, what string, f func(context.Context) error) (err error) {
	if !mine {
		if err := c.admit(ctx, tk, what); err != nil {
			c.endedOK.Store(false)
			c.pass(tk, false, err)
			return err
		}
	}
	// Deferred, so that the turn moves on whatever happens in f.
	defer func() { c.pass(tk, true, err) }()
	return c.runTurn(ctx, tk, what, f)
}

// runTurn runs f, whose turn it is, and turns its failure into the
// communicator's state. The checks before f are loads of flags that are
// almost never set; what they guard is out of line, in why.
func (c *Communicator) runTurn(ctx context.Context, tk ticket, what string, f func(context.Context) error) error {
	c.endedOK.Store(false) // until f returns nil: a call refused below told its caller
	if c.stopping.Load() || c.broken.Load() != nil || c.faulted.Load() || ctx.Err() != nil {
		if err := c.why(ctx, what); err != nil {
			return err
		}
	}
	if _, bounded := ctx.Deadline(); bounded {
		// The watchdog's timeout is for contexts without a deadline.
		c.bounded.Store(tk.n + 1)
	}
	if c.life != nil {
		var stop func()
		ctx, stop = c.bindLife(ctx)
		defer stop()
	}
	var start time.Time
	timing := c.ext.timing.Load()
	if timing {
		start = time.Now()
	}
	before := c.g.Seq()
	err := f(ctx)
	if timing {
		c.ext.took.took(what, time.Since(start))
	}
	if n := c.g.Seq(); n != before {
		if err != nil {
			c.ext.failedSeq.Store(n)
		}
		c.ext.ended.Store(n)
	}
	c.g.Ended(err)
	c.endedOK.Store(err == nil)
	if err != nil {
		return c.failed(what, err)
	}
	return nil
}

// why is the error of a collective that may not run, or nil if it may
// after all (Close or Abort has set stopping but not yet closed its
// channel).
func (c *Communicator) why(ctx context.Context, what string) error {
	if err := c.unusable(); err != nil {
		return fmt.Errorf("%s: %s: %w", c.names().Prefix(), what, err)
	}
	if b := c.broken.Load(); b != nil {
		return fmt.Errorf("%s: %s: %w (cause: %w)", c.names().Prefix(), what, ErrBroken, *b)
	}
	if err := ctx.Err(); err != nil {
		return c.skipped(what, err)
	}
	if !c.faulted.Load() {
		return nil
	}
	err := c.callError(what, false, c.faultErr())
	c.setBroken(err)
	return err
}

// bindLife makes a sub-communicator's call end when the communicator does
// (see Communicator.life).
func (c *Communicator) bindLife(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.life, func() { cancel(context.Cause(c.life)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// latestRunning reports whether the latest call the group numbered is
// still running, from any goroutine. A call issued but not yet numbered
// (in its preamble, or packing AllReduceMany's buffers) leaves the latest
// numbered one, which returned, as the latest: a fault seen then must
// name the call to come, not that one.
func (c *Communicator) latestRunning() bool {
	return collectives.CallNumber(c.g.Recent()) > c.ext.ended.Load()
}
