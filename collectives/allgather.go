package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// ringAllGather passes chunks around the ring until every rank has all n;
// rank r starts with chunk r.
func (c *call) ringAllGather(buf []byte, count, es int) error {
	n, r := c.t.Size(), c.t.Rank()
	next, prev := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		out := chunk(buf, count, n, mod(r-s, n), es)
		in := chunk(buf, count, n, mod(r-s-1, n), es)
		if err := c.stream(next, prev, out, in, func(dst, src []byte) { c.copy(dst, src) }); err != nil {
			return err
		}
	}
	return nil
}

// AllGather concatenates every rank's send, in rank order, into recv on
// every rank; len(recv) must be Size()*len(send).
func (g *Group) AllGather(ctx context.Context, send, recv []byte, dt reduce.DType) error {
	n, r := g.t.Size(), g.t.Rank()
	count, err := checkLen("allgather", send, dt)
	if err != nil {
		return err
	}
	if len(recv) != n*len(send) {
		return fmt.Errorf("allgather: receive buffer of %d bytes, want %d ranks x %d bytes = %d", len(recv), n, len(send), n*len(send))
	}
	algo := g.choose(AllGather, len(recv))
	c := g.newCall(ctx, spec{what: tag(AllGather, algo, dt, 0), count: uint64(count)})
	c.copy(recv[r*len(send):], send)
	if algo == Local {
		return nil
	}
	return c.ringAllGather(recv, count*n, dt.Size())
}

// AllGatherV concatenates every rank's send, in rank order, into recv on
// every rank: rank q contributes counts[q] elements, len(send) must be
// counts[Rank()] elements and len(recv) their sum. Every rank passes the
// same counts.
func (g *Group) AllGatherV(ctx context.Context, send, recv []byte, counts []int, dt reduce.DType) error {
	if _, err := checkLen("allgatherv", send, dt); err != nil {
		return err
	}
	es, r := dt.Size(), g.t.Rank()
	offs, err := g.checkCounts("allgatherv", "counts", counts, es)
	if err != nil {
		return err
	}
	if len(send) != counts[r]*es {
		return invalid("allgatherv: send buffer of %d elements, but counts[%d] = %d", len(send)/es, r, counts[r])
	}
	if len(recv) != offs[len(counts)] {
		return invalid("allgatherv: receive buffer of %d elements, want the sum of counts, %d", len(recv)/max(es, 1), total(counts))
	}
	algo := g.choose(AllGatherV, len(recv))
	c := g.newCall(ctx, spec{what: tag(AllGatherV, algo, dt, 0), count: uint64(total(counts)), extra: countsSum(counts)})
	c.copy(recv[offs[r]:], send)
	if algo == Local {
		return nil
	}
	return c.ringAllGatherV(recv, offs)
}

// ringAllGatherV is ringAllGather over blocks of any size: block q is
// recv[offs[q]:offs[q+1]].
func (c *call) ringAllGatherV(buf []byte, offs []int) error {
	n, r := c.t.Size(), c.t.Rank()
	next, prev := mod(r+1, n), mod(r-1, n)
	block := func(q int) []byte { return buf[offs[q]:offs[q+1]:offs[q+1]] }
	for s := 0; s < n-1; s++ {
		if err := c.stream(next, prev, block(mod(r-s, n)), block(mod(r-s-1, n)), func(dst, src []byte) { c.copy(dst, src) }); err != nil {
			return err
		}
	}
	return nil
}
