package comm

import (
	"context"
	"fmt"
)

// AllGather concatenates every rank's send, in rank order, into recv on
// every rank: len(recv) must be Size()*len(send). send may be recv's own
// block (recv[Rank()*len(send):][:len(send)]), for an in-place gather;
// any other overlap is refused.
func AllGather[T Element](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.do(ctx, allGatherJob(c, send, recv))
}

// AllGatherAsync is AllGather, issued now and finished in the background.
func AllGatherAsync[T Element](ctx context.Context, c *Communicator, send, recv []T) *Request {
	return c.start(ctx, allGatherJob(c, send, recv))
}

func allGatherJob[T Element](c *Communicator, send, recv []T) job {
	if c == nil {
		return job{err: errNil("allgather")}
	}
	n := c.Size()
	if len(recv) != n*len(send) {
		return job{err: fmt.Errorf("comm: allgather: len(recv) = %d, want Size() x len(send) = %d x %d: %w", len(recv), n, len(send), ErrInvalid)}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if overlap(s, r) && !same(s, r[c.Rank()*len(s):(c.Rank()+1)*len(s)]) {
		return job{err: fmt.Errorf("comm: allgather: send overlaps recv other than at this rank's block: %w", ErrInvalid)}
	}
	return job{what: "allgather", f: func(ctx context.Context) error {
		return c.g.AllGather(ctx, s, r, dtypeOf[T]())
	}}
}

// AllGatherV is AllGather with a count per rank: rank q contributes
// counts[q] elements, len(send) is counts[Rank()] and len(recv) the sum
// of counts, blocks in rank order. Every rank passes the same counts. send
// may be recv's own block; any other overlap is refused.
func AllGatherV[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int) error {
	return c.do(ctx, allGatherVJob(c, send, recv, counts))
}

// AllGatherVAsync is AllGatherV, issued now and finished in the background.
func AllGatherVAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int) *Request {
	return c.start(ctx, allGatherVJob(c, send, recv, counts))
}

func allGatherVJob[T Element](c *Communicator, send, recv []T, counts []int) job {
	const what = "allgatherv"
	if c == nil {
		return job{err: errNil(what)}
	}
	offs, err := countOffsets(c, what, "counts", counts)
	if err != nil {
		return job{err: err}
	}
	r := c.Rank()
	if len(send) != counts[r] || len(recv) != offs[c.Size()] {
		return job{err: fmt.Errorf("comm: allgatherv: len(send) = %d and len(recv) = %d, want counts[%d] = %d and the sum of counts, %d: %w",
			len(send), len(recv), r, counts[r], offs[c.Size()], ErrInvalid)}
	}
	s, rb := bytesOf(send), bytesOf(recv)
	es := dtypeOf[T]().Size()
	if overlap(s, rb) && !same(s, rb[offs[r]*es:offs[r+1]*es]) {
		return job{err: fmt.Errorf("comm: allgatherv: send overlaps recv other than at this rank's block: %w", ErrInvalid)}
	}
	counts = append([]int(nil), counts...) // the caller may reuse its slice before an async call runs
	return job{what: what, f: func(ctx context.Context) error { return c.g.AllGatherV(ctx, s, rb, counts, dtypeOf[T]()) }}
}
