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
	if err := checkRoot(c, "broadcast", root); err != nil {
		return job{err: err}
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
	s, r, err := rootBlocks(c, "gather", send, recv, "send", "recv", root)
	if err != nil {
		return job{err: err}
	}
	return job{what: "gather", f: func(ctx context.Context) error { return c.g.Gather(ctx, s, r, dtypeOf[T](), root) }}
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
	r, s, err := rootBlocks(c, "scatter", recv, send, "recv", "send", root)
	if err != nil {
		return job{err: err}
	}
	return job{what: "scatter", f: func(ctx context.Context) error { return c.g.Scatter(ctx, s, r, dtypeOf[T](), root) }}
}

// rootBlocks checks the buffers of a gather or scatter (what): at the
// root, whole (gather's recv, scatter's send) holds Size() blocks of
// len(part) elements, and part, every rank's own block, may be the
// root's block of whole but overlap it nowhere else. The buffers come
// back as bytes, whole nil but at the root. partName and wholeName are
// the arguments' names, for the error.
func rootBlocks[T Element](c *Communicator, what string, part, whole []T, partName, wholeName string, root int) (p, w []byte, err error) {
	if c == nil {
		return nil, nil, errNil(what)
	}
	if err := checkRoot(c, what, root); err != nil {
		return nil, nil, err
	}
	p, w = bytesOf(part), bytesOf(whole)
	if c.Rank() != root {
		return p, nil, nil
	}
	if len(whole) != c.Size()*len(part) {
		return nil, nil, fmt.Errorf("comm: %s: len(%s) = %d at the root, want Size() x len(%s) = %d x %d: %w",
			what, wholeName, len(whole), partName, c.Size(), len(part), ErrInvalid)
	}
	if overlap(p, w) && !same(p, w[root*len(p):(root+1)*len(p)]) {
		return nil, nil, fmt.Errorf("comm: %s: %s overlaps %s other than at the root's block: %w", what, partName, wholeName, ErrInvalid)
	}
	return p, w, nil
}
