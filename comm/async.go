package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
//
// Taking a ticket whose turn has come, and passing the turn on when
// nobody waits, are one atomic add each, with no lock, as every blocking
// collective does both. The lock guards the slow cases. A goroutine that waits
// for its turn, and a ticket that gave up, count themselves in slow first
// and only then look at done; pass moves done first and only then looks
// at slow. So whichever comes second sees the other.
type turns struct {
	issued atomic.Uint64 // tickets taken
	done   atomic.Uint64 // every ticket below done is finished; done's own may run
	slow   atomic.Int64  // waiters plus tickets in gaveUp: pass must take mu

	mu     sync.Mutex
	gaveUp map[uint64]error // tickets that gave up waiting before their turn, and why
	wake   chan struct{}    // closed when done moves; nil until someone waits
}

// ticket is a place in the issue order.
type ticket struct {
	n uint64
	// then, if set, learns the outcome before the next collective may
	// start, so that a Request is done before anything issued after it.
	then func(error)
}

// issue takes the next ticket, and says whether its turn has come
// already, as it nearly always has for a blocking collective. A turn that
// has come stays this ticket's until it passes it on.
func (c *Communicator) issue() (tk ticket, mine bool) {
	o := &c.turns
	tk.n = o.issued.Add(1) - 1
	return tk, o.done.Load() == tk.n
}

// inFlight reports whether a collective was issued and is not done, and
// which one's turn it is.
func (o *turns) inFlight() (turn uint64, ok bool) {
	d := o.done.Load()
	return d, o.issued.Load() > d
}

// waitTurn waits until tk's turn has come, or ctx ends or stop closes
// (with false).
func (o *turns) waitTurn(ctx context.Context, tk ticket, stop1, stop2 <-chan struct{}) bool {
	o.slow.Add(1)
	defer o.slow.Add(-1)
	for {
		o.mu.Lock()
		if o.done.Load() == tk.n {
			o.mu.Unlock()
			return true
		}
		if o.wake == nil {
			o.wake = make(chan struct{})
		}
		moved := o.wake
		o.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		case <-stop1:
			return false
		case <-stop2:
			return false
		}
	}
}

// pass hands the turn on. A collective that gave up waiting is marked,
// and skipped when its turn comes: it must not let the next one overtake
// the one before it.
func (c *Communicator) pass(tk ticket, had bool, err error) {
	if tk.then != nil {
		tk.then(err)
	}
	o := &c.turns
	if had {
		o.done.Add(1)
		if o.slow.Load() == 0 {
			return
		}
	}
	var skipped error
	o.mu.Lock()
	if !had {
		if o.gaveUp == nil {
			o.gaveUp = map[uint64]error{}
		}
		o.gaveUp[tk.n] = err
		o.slow.Add(1)
	}
	// Nobody holds the turn of a ticket that gave up, so nobody else
	// moves done while it is skipped.
	for d := o.done.Load(); o.gaveUp[d] != nil; d++ {
		if skipped == nil && c.breakFor(o.gaveUp[d]) {
			// Broken before the turn moves on, so that the next
			// collective cannot run in its place.
			skipped = o.gaveUp[d]
		}
		delete(o.gaveUp, d)
		o.slow.Add(-1)
		o.done.Store(d + 1)
	}
	if o.wake != nil {
		close(o.wake)
		o.wake = nil
	}
	o.mu.Unlock()
	if skipped != nil {
		// Its turn has come, and the collectives before it are done:
		// the other ranks are now waiting for it in vain.
		go c.tellSkipped(skipped)
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
	ctx, j = c.admitJob(ctx, j)
	if j.err != nil {
		return j.err
	}
	return c.run(ctx, j.what, j.f)
}

// admitJob turns a job refused for its arguments, or for a nil ctx, into
// one that takes its place in the collective order and fails there (see
// failed), so that the ranks waiting for this one in that call are told
// rather than left out of step. Only a job of one rank, or a call on a
// nil Communicator, is refused on the spot.
func (c *Communicator) admitJob(ctx context.Context, j job) (context.Context, job) {
	if c == nil {
		if j.err == nil {
			j.err = errNil(j.what)
		}
		return ctx, j
	}
	if ctx == nil {
		ctx = context.Background()
		if j.err == nil {
			j.err = errNilContext(j.what)
		}
	}
	if j.err == nil || !isRefusal(j.err) || c.cfg.Size == 1 || c.broken.Load() != nil || c.unusable() != nil {
		// A broken communicator has nobody left to tell: the caller hears
		// of its arguments rather than of the old break.
		return ctx, j
	}
	refused := j.err
	return ctx, job{what: "refused call", f: func(context.Context) error { return refused }}
}

// isRefusal reports whether err refuses a call for its arguments.
func isRefusal(err error) bool { return errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnsupported) }

// refuse fails a collective this rank refused for its arguments, in its
// place in the collective order (see admitJob).
func (c *Communicator) refuse(ctx context.Context, what string, err error) error {
	_, j := c.admitJob(ctx, job{what: what, err: err})
	if j.err != nil {
		return j.err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return c.run(ctx, what, j.f)
}

// start issues j and returns at once. Arguments are checked before it is
// issued: a refused call returns a Request that is already done with the
// error, and takes no place in the order.
func (c *Communicator) start(ctx context.Context, j job) *Request {
	ctx, j = c.admitJob(ctx, j)
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
	if ctx == nil {
		ctx = context.Background() // waiting needs no deadline; nothing is refused
	}
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
