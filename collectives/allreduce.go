package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// AllReduce reduces buf element-wise across all ranks, in place: on return
// every rank holds the same bytes.
func (g *Group) AllReduce(ctx context.Context, buf []byte, dt reduce.DType, op reduce.Op) error {
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	// checkLen, by hand: it is not inlined, and this is every
	// allreduce's path.
	count, whole := dt.Count(len(buf))
	if !whole {
		return lenError("allreduce", buf, dt)
	}
	if op == reduce.ExactSum {
		if exactFloat(dt, op) {
			return g.exactAllReduce(ctx, buf, count, dt) // exact.go
		}
		op = exactOp(op)
	}
	algo, wide := g.chooseReduction(AllReduce, dt, op, len(buf))
	return g.allReduceWith(ctx, algo, wide, buf, count, dt, op)
}

// allReduceWith runs the allreduce of count elements of buf with the
// algorithm the table chose, on float32 partial results if wide.
func (g *Group) allReduceWith(ctx context.Context, algo Algo, wide bool, buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	c := g.newCall(ctx, spec{what: tag(AllReduce, algo, dt, op), count: uint64(count)})
	if algo != Local && wide {
		// Float32 partial results, Avg's division included (wide.go).
		return c.allReduceWide(algo, buf, count, dt, op)
	}
	var err error
	switch algo {
	case Local:
	case Ring:
		err = c.ringAllReduce(buf, count, dt, op)
	case RecursiveDoubling:
		err = c.recursiveDoubling(buf, dt, op)
	case Hier:
		err = c.hierAllReduce(buf, count, dt, op)
	case HierPipe:
		err = c.hierPipeAllReduce(buf, count, dt, op)
	case Rabenseifner:
		err = c.rabenseifner(buf, count, dt, op)
	case Tree:
		err = c.treeAllReduce(buf, dt, op)
	case Pairwise:
		// Avg divided by the owner of each chunk, as in the ring.
		return c.pairwiseAllReduce(buf, count, dt, op, false)
	default:
		return fmt.Errorf("allreduce: algorithm %v: %w", algo, ErrBadAlgo)
	}
	if err != nil {
		return err
	}
	if op == reduce.Avg && algo != Ring {
		// The ring divides its own chunk before sharing it.
		reduce.Scale(dt, buf, g.t.Size())
	}
	return nil
}

// ringAllReduce is a reduce-scatter that leaves rank r with the full
// reduction of chunk r, then an allgather of the chunks. Each chunk travels
// in segments, so the next rank reduces segment k while segment k+1 is on
// the wire. Every chunk is reduced exactly once along the ring and then
// copied, so all ranks end with identical bytes.
func (c *call) ringAllReduce(buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	n, r, es := c.t.Size(), c.t.Rank(), dt.Size()
	next, prev := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		out := chunk(buf, count, n, mod(r-s-1, n), es)
		in := chunk(buf, count, n, mod(r-s-2, n), es)
		err := c.stream(next, prev, out, in, func(dst, src []byte) { c.reduce(dt, op, dst, dst, src) })
		if err != nil {
			return err
		}
	}
	if op == reduce.Avg {
		reduce.Scale(dt, chunk(buf, count, n, r, es), n)
	}
	return c.ringAllGather(buf, count, es)
}

// recursiveDoubling exchanges the whole buffer with partner r^2^k for each
// k. When n is not a power of two, the ranks beyond the largest power of two
// p first fold their data into rank r-p and get the result back at the end.
// Each exchange computes lower-rank-data op higher-rank-data on both sides,
// so both sides get the same bits even for NaN payloads.
func (c *call) recursiveDoubling(buf []byte, dt reduce.DType, op reduce.Op) error {
	if n := c.g.n; n&(n-1) == 0 && len(buf) <= c.segMax {
		return c.swapAll(buf, dt, op)
	}
	return c.onPowerOfTwo(buf, buf, dt, op, func(p int) error {
		r := c.t.Rank()
		for mask := 1; mask < p; mask <<= 1 {
			partner := r ^ mask
			err := c.stream(partner, partner, buf, buf, func(dst, src []byte) { c.combine(dt, op, partner < r, dst, src) })
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// swapAll is recursiveDoubling for the latency-bound case it is chosen
// for: a power-of-two number of ranks and a buffer that travels in one
// message. It does what stream does for one segment, without the segment
// arithmetic and the calls through closures, which were a measurable part
// of an 8-byte allreduce.
func (c *call) swapAll(buf []byte, dt reduce.DType, op reduce.Op) error {
	r, n := c.g.rank, c.g.n
	for mask := 1; mask < n; mask <<= 1 {
		partner := r ^ mask
		if err := c.send(partner, buf); err != nil {
			return err
		}
		msg, err := c.recv(partner, len(buf))
		if err != nil {
			return err
		}
		c.combine(dt, op, partner < r, buf, msg.Data)
		c.release(msg)
	}
	return nil
}

// onPowerOfTwo runs core, an allreduce among the first p ranks (p the
// largest power of two <= n), after folding each rank r >= p into rank
// r-p and before handing the result back to it. fold is what is folded
// in (reduced with dt and op), result what is handed back: the same
// buffer, except in a wide reduction (wide.go), which folds float32 and
// hands back the rounded 16 bits.
func (c *call) onPowerOfTwo(fold, result []byte, dt reduce.DType, op reduce.Op, core func(p int) error) error {
	n, r := c.t.Size(), c.t.Rank()
	p := 1
	for p*2 <= n {
		p *= 2
	}
	if r >= p {
		if err := c.sendAll(r-p, fold); err != nil {
			return err
		}
		return c.recvAll(r-p, result, func(dst, src []byte) { c.copy(dst, src) })
	}
	if r+p < n {
		if err := c.recvAll(r+p, fold, func(dst, src []byte) { c.combine(dt, op, false, dst, src) }); err != nil {
			return err
		}
	}
	if err := core(p); err != nil {
		return err
	}
	if r+p < n {
		return c.sendAll(r+p, result)
	}
	return nil
}

// rabenseifner is the allreduce of Rabenseifner: a reduce-scatter by
// recursive halving (in step k each rank swaps half of its current range
// with partner r^(p/2^k) and reduces the half it keeps), leaving rank r
// with chunk r of p, then an allgather by recursive doubling that undoes
// the halving. Like recursive doubling it takes 2log2(p) steps, like the
// ring each rank moves only about twice the buffer, not log2(p) times. As
// in recursiveDoubling, ranks beyond the largest power of two p fold into
// rank r-p first and get the result at the end. Each chunk is reduced by
// exactly one rank and then copied, so every rank ends with the same bits.
func (c *call) rabenseifner(buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	return c.halvingDoubling(buf, buf, count, dt, op, nil)
}

// halvingDoubling is rabenseifner: the halving phase reduces half (with
// dt and op), the doubling phase shares full's chunks. Both are buf, but
// for a wide reduction (wide.go), which halves a float32 copy of the
// buffer and, between the phases, rounds the chunk this rank owns into
// the 16-bit buffer with round(half's chunk, full's chunk), which then
// the doubling phase shares.
func (c *call) halvingDoubling(half, full []byte, count int, dt reduce.DType, op reduce.Op, round func(h, f []byte)) error {
	hes, fes := len(half)/max(count, 1), len(full)/max(count, 1)
	return c.onPowerOfTwo(half, full, dt, op, func(p int) error {
		r := c.t.Rank()
		q, rem := count/p, count%p
		off := func(i int) int { return i*q + min(i, rem) }
		span := func(b []byte, lo, hi int) []byte {
			es := hes
			if len(b) != len(half) {
				es = fes
			}
			return b[off(lo)*es : off(hi)*es : off(hi)*es]
		}
		lo, hi := 0, p
		for mask := p / 2; mask >= 1; mask /= 2 {
			partner := r ^ mask
			mid := (lo + hi) / 2
			keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
			if r&mask != 0 {
				keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
			}
			err := c.stream(partner, partner, span(half, giveLo, giveHi), span(half, keepLo, keepHi), func(dst, src []byte) { c.combine(dt, op, partner < r, dst, src) })
			if err != nil {
				return err
			}
			lo, hi = keepLo, keepHi
		}
		if round != nil {
			round(span(half, lo, hi), span(full, lo, hi))
		}
		for mask := 1; mask < p; mask <<= 1 {
			partner := r ^ mask
			w := hi - lo
			plo, phi := hi, hi+w
			if r&mask != 0 {
				plo, phi = lo-w, lo
			}
			if err := c.stream(partner, partner, span(full, lo, hi), span(full, plo, phi), func(dst, src []byte) { c.copy(dst, src) }); err != nil {
				return err
			}
			lo, hi = min(lo, plo), max(hi, phi)
		}
		return nil
	})
}

// treeAllReduce reduces up the binomial tree rooted at rank 0, in place
// (every inner rank sums into its own buffer, which the broadcast then
// overwrites), and broadcasts the result back down the same tree. Both
// halves are pipelined by segment. Only rank 0 computes the result, so
// every rank ends with its bits.
func (c *call) treeAllReduce(buf []byte, dt reduce.DType, op reduce.Op) error {
	parent, children := c.g.tree(0)
	if err := c.reduceUp(buf, dt, op, parent, children); err != nil {
		return err
	}
	return c.spreadDown(buf, parent, children)
}
