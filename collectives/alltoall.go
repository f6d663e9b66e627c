package collectives

import (
	"context"

	"github.com/gocoll/gocoll/internal/reduce"
)

// AllToAll sends block q of send to rank q, which puts it in block
// Rank() of its recv: send and recv hold Size() blocks of equal length.
func (g *Group) AllToAll(ctx context.Context, send, recv []byte, dt reduce.DType) error {
	if _, err := checkLen("alltoall", send, dt); err != nil {
		return err
	}
	n, es := g.t.Size(), dt.Size()
	if len(send)%(n*es) != 0 {
		return invalid("alltoall: send buffer of %d elements does not split into %d equal blocks", len(send)/es, n)
	}
	if len(recv) != len(send) {
		return invalid("alltoall: receive buffer of %d bytes, want %d like send", len(recv), len(send))
	}
	b := len(send) / n
	offs := make([]int, n+1)
	for q := range offs {
		offs[q] = q * b
	}
	algo := g.choose(AllToAll, len(send))
	c := g.newCall(ctx, spec{what: tag(AllToAll, algo, dt, 0), count: uint64(b / es)})
	return c.pairwise(send, recv, offs, offs)
}

// AllToAllV sends sendCounts[q] elements to rank q and receives
// recvCounts[q] from it; blocks lie in rank order in send and recv. What
// rank p sends to q must be what q expects from p.
func (g *Group) AllToAllV(ctx context.Context, send []byte, sendCounts []int, recv []byte, recvCounts []int, dt reduce.DType) error {
	if _, err := checkLen("alltoallv", send, dt); err != nil {
		return err
	}
	es := dt.Size()
	so, err := g.checkCounts("alltoallv", "sendCounts", sendCounts, es)
	if err != nil {
		return err
	}
	ro, err := g.checkCounts("alltoallv", "recvCounts", recvCounts, es)
	if err != nil {
		return err
	}
	n := g.t.Size()
	if len(send) != so[n] {
		return invalid("alltoallv: send buffer of %d elements, want the sum of sendCounts, %d", len(send)/es, total(sendCounts))
	}
	if len(recv) != ro[n] {
		return invalid("alltoallv: receive buffer of %d elements, want the sum of recvCounts, %d", len(recv)/es, total(recvCounts))
	}
	r := g.t.Rank()
	if sendCounts[r] != recvCounts[r] {
		return invalid("alltoallv: sendCounts[%d] = %d but recvCounts[%d] = %d: this rank's block to itself", r, sendCounts[r], r, recvCounts[r])
	}
	algo := g.choose(AllToAllV, len(send))
	// Counts differ between ranks, so only the kind and type are compared
	// up front; each block's length is checked as it arrives.
	c := g.newCall(ctx, spec{what: tag(AllToAllV, algo, dt, 0)})
	return c.pairwise(send, recv, so, ro)
}

// pairwise runs n-1 exchange steps: in step s rank r sends its block for
// r+s and receives the block from r-s, so every pair meets exactly once
// and each step is a permutation (no rank is the target of two senders).
func (c *call) pairwise(send, recv []byte, so, ro []int) error {
	n, r := c.t.Size(), c.t.Rank()
	c.copy(recv[ro[r]:ro[r+1]], send[so[r]:so[r+1]])
	for s := 1; s < n; s++ {
		to, from := mod(r+s, n), mod(r-s, n)
		err := c.stream(to, from, send[so[to]:so[to+1]], recv[ro[from]:ro[from+1]], func(dst, src []byte) { c.copy(dst, src) })
		if err != nil {
			return err
		}
	}
	return nil
}
