package comm

import (
	"context"
	"fmt"
)

// AllToAll sends block q of send to rank q, which puts it in block Rank()
// of its recv: send and recv are Size() blocks of the same length, and
// must not overlap.
func AllToAll[T Element](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.do(ctx, allToAllJob(c, send, recv))
}

// AllToAllAsync is AllToAll, issued now and finished in the background.
func AllToAllAsync[T Element](ctx context.Context, c *Communicator, send, recv []T) *Request {
	return c.start(ctx, allToAllJob(c, send, recv))
}

func allToAllJob[T Element](c *Communicator, send, recv []T) job {
	const what = "alltoall"
	if c == nil {
		return job{err: errNil(what)}
	}
	if len(send)%c.Size() != 0 || len(recv) != len(send) {
		return job{err: fmt.Errorf("comm: alltoall: len(send) = %d and len(recv) = %d, want equal and a multiple of Size() = %d: %w", len(send), len(recv), c.Size(), ErrInvalid)}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if overlap(s, r) {
		return job{err: fmt.Errorf("comm: alltoall: send and recv overlap: %w", ErrInvalid)}
	}
	return job{what: what, f: func(ctx context.Context) error { return c.g.AllToAll(ctx, s, r, dtypeOf[T]()) }}
}

// AllToAllV sends sendCounts[q] elements to rank q and receives
// recvCounts[q] from it; blocks lie in rank order in send and recv, whose
// lengths are the sums of the counts. What rank p sends to q must be what
// q expects from p. send and recv must not overlap.
func AllToAllV[T Element](ctx context.Context, c *Communicator, send []T, sendCounts []int, recv []T, recvCounts []int) error {
	return c.do(ctx, allToAllVJob(c, send, sendCounts, recv, recvCounts))
}

// AllToAllVAsync is AllToAllV, issued now and finished in the background.
func AllToAllVAsync[T Element](ctx context.Context, c *Communicator, send []T, sendCounts []int, recv []T, recvCounts []int) *Request {
	return c.start(ctx, allToAllVJob(c, send, sendCounts, recv, recvCounts))
}

func allToAllVJob[T Element](c *Communicator, send []T, sendCounts []int, recv []T, recvCounts []int) job {
	const what = "alltoallv"
	if c == nil {
		return job{err: errNil(what)}
	}
	so, err := countOffsets(c, what, "sendCounts", sendCounts)
	if err != nil {
		return job{err: err}
	}
	ro, err := countOffsets(c, what, "recvCounts", recvCounts)
	if err != nil {
		return job{err: err}
	}
	n, r := c.Size(), c.Rank()
	if len(send) != so[n] || len(recv) != ro[n] {
		return job{err: fmt.Errorf("comm: alltoallv: len(send) = %d and len(recv) = %d, want the sums of sendCounts and recvCounts, %d and %d: %w",
			len(send), len(recv), so[n], ro[n], ErrInvalid)}
	}
	if sendCounts[r] != recvCounts[r] {
		return job{err: fmt.Errorf("comm: alltoallv: sendCounts[%d] = %d but recvCounts[%d] = %d (this rank's block to itself): %w", r, sendCounts[r], r, recvCounts[r], ErrInvalid)}
	}
	s, rb := bytesOf(send), bytesOf(recv)
	if overlap(s, rb) {
		return job{err: fmt.Errorf("comm: alltoallv: send and recv overlap: %w", ErrInvalid)}
	}
	sc, rc := append([]int(nil), sendCounts...), append([]int(nil), recvCounts...)
	return job{what: what, f: func(ctx context.Context) error { return c.g.AllToAllV(ctx, s, sc, rb, rc, dtypeOf[T]()) }}
}
