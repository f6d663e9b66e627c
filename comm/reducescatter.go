package comm

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// ReduceScatter combines send (Size() blocks of len(recv) elements)
// element-wise across ranks with op and leaves block Rank() of the result
// in recv. recv may be send's own block, for an in-place reduce-scatter;
// any other overlap is refused.
func ReduceScatter[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op) error {
	return c.do(ctx, reduceScatterJob(c, send, recv, op))
}

// ReduceScatterAsync is ReduceScatter, issued now and finished in the
// background.
func ReduceScatterAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op) *Request {
	return c.start(ctx, reduceScatterJob(c, send, recv, op))
}

func reduceScatterJob[T Element](c *Communicator, send, recv []T, op Op) job {
	if c == nil {
		return job{err: errNil("reducescatter")}
	}
	if err := checkOp[T]("reducescatter", op); err != nil {
		return job{err: err}
	}
	n := c.Size()
	if len(send) != n*len(recv) {
		return job{err: fmt.Errorf("comm: reducescatter: len(send) = %d, want Size() x len(recv) = %d x %d: %w", len(send), n, len(recv), ErrInvalid)}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if overlap(s, r) && !same(r, s[c.Rank()*len(r):(c.Rank()+1)*len(r)]) {
		return job{err: fmt.Errorf("comm: reducescatter: recv overlaps send other than at this rank's block: %w", ErrInvalid)}
	}
	return job{what: "reducescatter", f: func(ctx context.Context) error {
		return c.g.ReduceScatter(ctx, s, r, dtypeOf[T](), reduce.Op(op))
	}}
}

// ReduceScatterV is ReduceScatter with a count per rank: block q of the
// result, counts[q] elements, goes to rank q; len(send) is the sum of
// counts and len(recv) counts[Rank()]. Every rank passes the same counts.
// recv may be send's own block; any other overlap is refused.
func ReduceScatterV[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int, op Op) error {
	return c.do(ctx, reduceScatterVJob(c, send, recv, counts, op))
}

// ReduceScatterVAsync is ReduceScatterV, issued now and finished in the
// background.
func ReduceScatterVAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int, op Op) *Request {
	return c.start(ctx, reduceScatterVJob(c, send, recv, counts, op))
}

func reduceScatterVJob[T Element](c *Communicator, send, recv []T, counts []int, op Op) job {
	const what = "reducescatterv"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkOp[T](what, op); err != nil {
		return job{err: err}
	}
	offs, err := countOffsets(c, what, "counts", counts)
	if err != nil {
		return job{err: err}
	}
	r := c.Rank()
	if len(send) != offs[c.Size()] || len(recv) != counts[r] {
		return job{err: fmt.Errorf("comm: reducescatterv: len(send) = %d and len(recv) = %d, want the sum of counts, %d, and counts[%d] = %d: %w",
			len(send), len(recv), offs[c.Size()], r, counts[r], ErrInvalid)}
	}
	s, rb := bytesOf(send), bytesOf(recv)
	es := dtypeOf[T]().Size()
	if overlap(s, rb) && !same(rb, s[offs[r]*es:offs[r+1]*es]) {
		return job{err: fmt.Errorf("comm: reducescatterv: recv overlaps send other than at this rank's block: %w", ErrInvalid)}
	}
	counts = append([]int(nil), counts...)
	return job{what: what, f: func(ctx context.Context) error {
		return c.g.ReduceScatterV(ctx, s, rb, counts, dtypeOf[T](), reduce.Op(op))
	}}
}
