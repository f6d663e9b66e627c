package comm

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// Broadcast copies root's buf into every other rank's buf. Every rank must
// pass the same length and root.
func Broadcast[T Element](ctx context.Context, c *Communicator, buf []T, root int) error {
	return c.do(ctx, broadcastJob(c, buf, root))
}

// BroadcastAsync is Broadcast, issued now and finished in the background.
func BroadcastAsync[T Element](ctx context.Context, c *Communicator, buf []T, root int) *Request {
	return c.start(ctx, broadcastJob(c, buf, root))
}

func broadcastJob[T Element](c *Communicator, buf []T, root int) job {
	if c == nil {
		return job{err: errNil("broadcast")}
	}
	if root < 0 || root >= c.Size() {
		return job{err: fmt.Errorf("comm: broadcast: root %d out of range [0, %d): %w", root, c.Size(), ErrInvalid)}
	}
	return job{what: "broadcast", f: func(ctx context.Context) error {
		return c.g.Broadcast(ctx, bytesOf(buf), dtypeOf[T](), root)
	}}
}

// Reduce combines send element-wise across ranks with op into recv on the
// root; recv is ignored on the other ranks (nil will do). On the root
// len(recv) must be len(send), and recv may be send itself (in place);
// any other overlap is refused. Every rank passes the same length, op and
// root.
func Reduce[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op, root int) error {
	return c.do(ctx, reduceJob(c, send, recv, op, root))
}

// ReduceAsync is Reduce, issued now and finished in the background.
func ReduceAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op, root int) *Request {
	return c.start(ctx, reduceJob(c, send, recv, op, root))
}

func reduceJob[T Element](c *Communicator, send, recv []T, op Op, root int) job {
	const what = "reduce"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkOp[T](what, op); err != nil {
		return job{err: err}
	}
	if err := checkRoot(c, what, root); err != nil {
		return job{err: err}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if c.Rank() == root {
		if len(recv) != len(send) {
			return job{err: fmt.Errorf("comm: reduce: len(recv) = %d at the root, want len(send) = %d: %w", len(recv), len(send), ErrInvalid)}
		}
		if overlap(s, r) && !same(s, r) {
			return job{err: fmt.Errorf("comm: reduce: send and recv overlap without being the same slice: %w", ErrInvalid)}
		}
	} else {
		r = nil
	}
	return job{what: what, f: func(ctx context.Context) error {
		return c.g.Reduce(ctx, s, r, dtypeOf[T](), reduce.Op(op), root)
	}}
}

// Gather concatenates every rank's send, in rank order, into recv on the
// root, where len(recv) must be Size()*len(send); recv is ignored on the
// other ranks. On the root, send may be recv's own block (in place); any
// other overlap is refused.
func Gather[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.do(ctx, gatherJob(c, send, recv, root))
}

// GatherAsync is Gather, issued now and finished in the background.
func GatherAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) *Request {
	return c.start(ctx, gatherJob(c, send, recv, root))
}

func gatherJob[T Element](c *Communicator, send, recv []T, root int) job {
	const what = "gather"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkRoot(c, what, root); err != nil {
		return job{err: err}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if c.Rank() == root {
		if len(recv) != c.Size()*len(send) {
			return job{err: fmt.Errorf("comm: gather: len(recv) = %d at the root, want Size() x len(send) = %d x %d: %w", len(recv), c.Size(), len(send), ErrInvalid)}
		}
		if overlap(s, r) && !same(s, r[root*len(s):(root+1)*len(s)]) {
			return job{err: fmt.Errorf("comm: gather: send overlaps recv other than at the root's block: %w", ErrInvalid)}
		}
	} else {
		r = nil
	}
	return job{what: what, f: func(ctx context.Context) error { return c.g.Gather(ctx, s, r, dtypeOf[T](), root) }}
}

// Scatter hands block q of the root's send (Size() blocks of len(recv)
// elements) to rank q's recv; send is ignored on the other ranks. On the
// root, recv may be send's own block (in place); any other overlap is
// refused.
func Scatter[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.do(ctx, scatterJob(c, send, recv, root))
}

// ScatterAsync is Scatter, issued now and finished in the background.
func ScatterAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) *Request {
	return c.start(ctx, scatterJob(c, send, recv, root))
}

func scatterJob[T Element](c *Communicator, send, recv []T, root int) job {
	const what = "scatter"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkRoot(c, what, root); err != nil {
		return job{err: err}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if c.Rank() == root {
		if len(send) != c.Size()*len(recv) {
			return job{err: fmt.Errorf("comm: scatter: len(send) = %d at the root, want Size() x len(recv) = %d x %d: %w", len(send), c.Size(), len(recv), ErrInvalid)}
		}
		if overlap(s, r) && !same(r, s[root*len(r):(root+1)*len(r)]) {
			return job{err: fmt.Errorf("comm: scatter: recv overlaps send other than at the root's block: %w", ErrInvalid)}
		}
	} else {
		s = nil
	}
	return job{what: what, f: func(ctx context.Context) error { return c.g.Scatter(ctx, s, r, dtypeOf[T](), root) }}
}
