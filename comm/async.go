package comm

import (
	"context"
	"errors"
	"fmt"
)

// Issue order. Every collective, blocking or not, takes a ticket when it
// is called, and runs only after the collective holding the previous
// ticket has finished. So collectives run in the order the program issued
// them, whichever goroutine waits for them: what makes the ranks agree is
// that every rank issues the same sequence, as with MPI's non-blocking
// collectives and NCCL's streams.

// ticket is a place in the issue order: prev closes when the collective
// before has finished, mine when this one has.
type ticket struct {
	prev, mine chan struct{}
	// then, if set, learns the outcome before the next collective may
	// start, so that a Request is done before anything issued after it.
	then func(error)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// issue takes the next ticket.
func (c *Communicator) issue() ticket {
	c.ext.mu.Lock()
	defer c.ext.mu.Unlock()
	tk := ticket{prev: c.ext.tail, mine: make(chan struct{})}
	if tk.prev == nil {
		tk.prev = closedChan
	}
	c.ext.tail = tk.mine
	return tk
}

// pass hands the turn on: at once if this collective had its turn, else
// when the previous one is done (a collective that gave up waiting must not
// let the next one overtake the one before it).
func (tk ticket) pass(had bool, err error) {
	if tk.then != nil {
		tk.then(err)
	}
	if had {
		close(tk.mine)
		return
	}
	go func() {
		<-tk.prev
		close(tk.mine)
	}()
}

// A Request is a collective in flight, returned by the Async forms. The
// buffers passed to it belong to the collective until it is done: the
// program must not read or write them before Wait returns (or Test reports
// done).
type Request struct {
	what string
	done chan struct{}
	err  error
}

// job is a collective whose arguments were checked: what it is called and
// what it does, or why it was refused.
type job struct {
	what string
	f    func(context.Context) error
	err  error
}

// do runs j now: the blocking form of every collective.
func (c *Communicator) do(ctx context.Context, j job) error {
	if j.err != nil {
		return j.err
	}
	return c.run(ctx, j.what, j.f)
}

// start issues j and returns at once. Arguments are checked before it is
// issued: a refused call returns a Request that is already done with the
// error, and takes no place in the order.
func (c *Communicator) start(ctx context.Context, j job) *Request {
	r := &Request{what: j.what, done: make(chan struct{})}
	if j.err != nil {
		r.err = j.err
		close(r.done)
		return r
	}
	tk := c.issue()
	tk.then = func(err error) {
		r.err = err
		close(r.done)
	}
	go c.runAt(ctx, tk, j.what, j.f)
	return r
}

// Wait waits until the collective is done and returns its error. If ctx
// ends first, Wait returns ctx's error, but the collective goes on (its
// own context, given when it was issued, bounds it); Wait may be called
// again.
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("comm: waiting for %s: %w", r.what, ctx.Err())
	}
}

// Test reports whether the collective is done, and its error if so,
// without waiting.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// Done is closed when the collective is done, for use in a select.
func (r *Request) Done() <-chan struct{} { return r.done }

// WaitAll waits for every request and returns their errors joined.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var errs []error
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
