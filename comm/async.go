package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Issue order. Every collective, blocking or not, takes a ticket when it
// is called, and runs only after the collective holding the previous
// ticket has finished. So collectives run in the order the program issued
// them, whichever goroutine waits for them: what makes the ranks agree is
// that every rank issues the same sequence, as with MPI's non-blocking
// collectives and NCCL's streams.

// turns is the issue order: tickets are numbered as issued, and ticket
// n runs once the tickets before it are done. Counting, not a channel per
// ticket, keeps a blocking collective free of allocations: a channel is
// made only when some goroutine has to wait for its turn.
type turns struct {
	mu     sync.Mutex
	issued uint64          // tickets taken
	done   uint64          // every ticket below done is finished; done's own may run
	gaveUp map[uint64]bool // tickets that gave up waiting before their turn
	wake   chan struct{}   // closed when done moves; nil until someone waits
}

// ticket is a place in the issue order.
type ticket struct {
	n uint64
	// then, if set, learns the outcome before the next collective may
	// start, so that a Request is done before anything issued after it.
	then func(error)
}

// issue takes the next ticket, and says whether its turn has come
// already, as it nearly always has for a blocking collective: one lock for
// what taking the ticket and then waiting for the turn would take two for.
// A turn that has come stays this ticket's until it passes it on.
func (c *Communicator) issue() (tk ticket, mine bool) {
	o := &c.turns
	o.mu.Lock()
	tk = ticket{n: o.issued}
	o.issued++
	mine = o.done == tk.n
	o.mu.Unlock()
	return tk, mine
}

// waitTurn returns once tk's turn has come, or a channel that closes when
// the order moves on and it may have.
func (o *turns) waitTurn(tk ticket) (mine bool, moved chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done == tk.n {
		return true, nil
	}
	if o.wake == nil {
		o.wake = make(chan struct{})
	}
	return false, o.wake
}

// pass hands the turn on. A collective that gave up waiting is marked,
// and skipped when its turn comes: it must not let the next one overtake
// the one before it.
func (c *Communicator) pass(tk ticket, had bool, err error) {
	if tk.then != nil {
		tk.then(err)
	}
	o := &c.turns
	o.mu.Lock()
	defer o.mu.Unlock()
	if !had {
		if o.gaveUp == nil {
			o.gaveUp = map[uint64]bool{}
		}
		o.gaveUp[tk.n] = true
	} else {
		o.done++
	}
	for o.gaveUp[o.done] {
		delete(o.gaveUp, o.done)
		o.done++
	}
	if o.wake != nil {
		close(o.wake)
		o.wake = nil
	}
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
	tk, mine := c.issue()
	tk.then = func(err error) {
		r.err = err
		close(r.done)
	}
	go c.runAt(ctx, tk, mine, j.what, j.f)
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
