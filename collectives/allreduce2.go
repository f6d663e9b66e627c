package collectives

import (
	"github.com/gocoll/gocoll/internal/reduce"
)

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
	n, r, es := c.t.Size(), c.t.Rank(), dt.Size()
	p := 1
	for p*2 <= n {
		p *= 2
	}
	combine := func(peer int) func(dst, src []byte) {
		if peer < r {
			return func(dst, src []byte) { reduce.Reduce(dt, op, dst, src, dst) }
		}
		return func(dst, src []byte) { reduce.Reduce(dt, op, dst, dst, src) }
	}
	if r >= p {
		if err := c.sendAll(r-p, buf); err != nil {
			return err
		}
		return c.recvAll(r-p, buf, func(dst, src []byte) { copy(dst, src) })
	}
	if r+p < n {
		if err := c.recvAll(r+p, buf, combine(r+p)); err != nil {
			return err
		}
	}
	q, rem := count/p, count%p
	off := func(i int) int { return (i*q + min(i, rem)) * es }
	span := func(lo, hi int) []byte { return buf[off(lo):off(hi):off(hi)] }
	lo, hi := 0, p
	for mask := p / 2; mask >= 1; mask /= 2 {
		partner := r ^ mask
		mid := (lo + hi) / 2
		keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
		if r&mask != 0 {
			keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
		}
		err := c.stream(partner, partner, span(giveLo, giveHi), span(keepLo, keepHi), combine(partner))
		if err != nil {
			return err
		}
		lo, hi = keepLo, keepHi
	}
	for mask := 1; mask < p; mask <<= 1 {
		partner := r ^ mask
		w := hi - lo
		plo, phi := hi, hi+w
		if r&mask != 0 {
			plo, phi = lo-w, lo
		}
		if err := c.stream(partner, partner, span(lo, hi), span(plo, phi), func(dst, src []byte) { copy(dst, src) }); err != nil {
			return err
		}
		lo, hi = min(lo, plo), max(hi, phi)
	}
	if r+p < n {
		return c.sendAll(r+p, buf)
	}
	return nil
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

// spreadDown receives each segment from the parent and passes it on to
// the children.
func (c *call) spreadDown(buf []byte, parent int, children []int) error {
	for k := 0; k < c.segments(len(buf)); k++ {
		seg := c.seg(buf, k)
		if parent >= 0 {
			msg, data, err := c.recv(parent, len(seg))
			if err != nil {
				return err
			}
			copy(seg, data)
			c.t.Release(msg)
		}
		for _, ch := range children {
			if err := c.send(ch, seg); err != nil {
				return err
			}
		}
	}
	return nil
}
