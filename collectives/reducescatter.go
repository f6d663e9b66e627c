package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// ReduceScatter reduces send (Size() blocks of len(recv) bytes) element-wise
// across ranks and leaves block r of the result in rank r's recv.
func (g *Group) ReduceScatter(ctx context.Context, send, recv []byte, dt reduce.DType, op reduce.Op) error {
	n, r := g.t.Size(), g.t.Rank()
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	count, err := checkLen("reducescatter", recv, dt)
	if err != nil {
		return err
	}
	if len(send) != n*len(recv) {
		return fmt.Errorf("reducescatter: send buffer of %d bytes, want %d ranks x %d bytes = %d", len(send), n, len(recv), n*len(recv))
	}
	if op == reduce.ExactSum {
		if exactFloat(dt, op) {
			// exact.go
			c := g.newCall(ctx, spec{what: tag(ReduceScatter, g.chooseExact(ReduceScatter), dt, op), count: uint64(count)})
			return c.exactReduceScatterOrLocal(func(q int) []byte { return send[q*len(recv) : (q+1)*len(recv)] }, send, recv, dt)
		}
		op = exactOp(op)
	}
	algo, wide := g.chooseReduction(ReduceScatter, dt, op, len(send))
	c := g.newCall(ctx, spec{what: tag(ReduceScatter, algo, dt, op), count: uint64(count)})
	block := func(b []byte, i int) []byte { return b[i*len(recv) : (i+1)*len(recv)] }
	if algo == Local {
		c.copy(recv, send)
	} else if algo == Pairwise {
		// Avg divided too.
		return c.pairwiseReduceScatter(func(q int) []byte { return block(send, q) }, recv, dt, op, wide)
	} else if wide {
		// Float32 partial results, Avg's division included (wide.go).
		own := func(q int) []byte { return block(send, q) }
		return c.wideRing(mod(r+1, n), mod(r-1, n), r, n, own, len(recv), recv, dt, op, n)
	} else {
		// The ring of ringAllReduce, out of place: the partial sum of the
		// block in flight lives in one of two scratch blocks (one being
		// sent while the other fills), and the last step lands in recv.
		scratch := make([]byte, 2*len(recv))
		tmp := [2][]byte{scratch[:len(recv)], scratch[len(recv):]}
		next, prev := mod(r+1, n), mod(r-1, n)
		for s := 0; s < n-1; s++ {
			out := block(send, mod(r-s-1, n))
			if s > 0 {
				out = tmp[(s-1)%2]
			}
			dst := recv
			if s < n-2 {
				dst = tmp[s%2]
			}
			own := block(send, mod(r-s-2, n))
			off := 0
			err := c.stream(next, prev, out, dst, func(d, src []byte) {
				c.reduce(dt, op, d, own[off:off+len(d)], src)
				off += len(d)
			})
			if err != nil {
				return err
			}
		}
	}
	if op == reduce.Avg {
		reduce.Scale(dt, recv, n)
	}
	return nil
}

// ReduceScatterV combines send element-wise across ranks with op and
// leaves block Rank() of the result in recv: block q is counts[q]
// elements, len(send) their sum and len(recv) counts[Rank()]. Every rank
// passes the same counts.
func (g *Group) ReduceScatterV(ctx context.Context, send, recv []byte, counts []int, dt reduce.DType, op reduce.Op) error {
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	if _, err := checkLen("reducescatterv", send, dt); err != nil {
		return err
	}
	n, r, es := g.t.Size(), g.t.Rank(), dt.Size()
	offs, err := g.checkCounts("reducescatterv", "counts", counts, es)
	if err != nil {
		return err
	}
	if len(send) != offs[n] {
		return invalid("reducescatterv: send buffer of %d elements, want the sum of counts, %d", len(send)/es, total(counts))
	}
	if len(recv) != counts[r]*es {
		return invalid("reducescatterv: receive buffer of %d elements, but counts[%d] = %d", len(recv)/es, r, counts[r])
	}
	if op == reduce.ExactSum {
		if exactFloat(dt, op) {
			// exact.go
			c := g.newCall(ctx, spec{what: tag(ReduceScatterV, g.chooseExact(ReduceScatterV), dt, op), count: uint64(total(counts)), extra: countsSum(counts)})
			return c.exactReduceScatterOrLocal(func(q int) []byte { return send[offs[q]:offs[q+1]] }, send, recv, dt)
		}
		op = exactOp(op)
	}
	algo, wide := g.chooseReduction(ReduceScatterV, dt, op, len(send))
	c := g.newCall(ctx, spec{what: tag(ReduceScatterV, algo, dt, op), count: uint64(total(counts)), extra: countsSum(counts)})
	block := func(b []byte, q int) []byte { return b[offs[q]:offs[q+1]] }
	big := 0
	for q := 0; q < n; q++ {
		big = max(big, offs[q+1]-offs[q])
	}
	if algo == Local {
		c.copy(recv, send)
	} else if algo == Pairwise {
		// Avg divided too.
		return c.pairwiseReduceScatter(func(q int) []byte { return block(send, q) }, recv, dt, op, wide)
	} else if wide {
		// Float32 partial results, Avg's division included (wide.go).
		own := func(q int) []byte { return block(send, q) }
		return c.wideRing(mod(r+1, n), mod(r-1, n), r, n, own, big, recv, dt, op, n)
	} else {
		// The ring of ReduceScatter with blocks of their own sizes: the
		// partial result in flight alternates between two scratch blocks
		// as large as the largest block, and the last step lands in recv.
		scratch := make([]byte, 2*big)
		tmp := [2][]byte{scratch[:big], scratch[big:]}
		next, prev := mod(r+1, n), mod(r-1, n)
		for s := 0; s < n-1; s++ {
			sent, got := mod(r-s-1, n), mod(r-s-2, n)
			out := block(send, sent)
			if s > 0 {
				out = tmp[(s-1)%2][:len(out)]
			}
			own := block(send, got)
			dst := recv
			if s < n-2 {
				dst = tmp[s%2][:len(own)]
			}
			off := 0
			err := c.stream(next, prev, out, dst, func(d, src []byte) {
				c.reduce(dt, op, d, own[off:off+len(d)], src)
				off += len(d)
			})
			if err != nil {
				return err
			}
		}
	}
	if op == reduce.Avg {
		reduce.Scale(dt, recv, n)
	}
	return nil
}
