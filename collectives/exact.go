package collectives

import (
	"context"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// ExactSum (reduce.ExactSum) on a float type: the exact sum of every
// rank's input, rounded once (reduce.Exact). Its result is a function of
// the inputs alone, so it is the same bits whatever the rank count, the
// algorithm, the transport or the order messages arrive in.
//
// One algorithm computes it, the pairwise reduce-scatter of wide.go with
// the exact kernel: every rank sends block q of its input, in the element
// type's own width, to rank q, which then holds all n inputs of its block
// and computes their exact sum in one pass (reduce.Exact). The allreduce
// follows it with a direct allgather of the rounded blocks (each rank
// sends its block to every other at once); Reduce with a gather of the
// blocks to the root. The wire carries what a Sum's ring
// carries, (n-1)/n of the buffer out and in per rank for the
// reduce-scatter, in n-1 concurrent messages instead of n-1 dependent
// steps.
//
// Why not the other algorithms: any scheme that forwards partial results
// (the ring, recursive doubling, Rabenseifner, trees) would have to carry
// an exact partial sum, which is not a value of the element type: a
// float32 partial needs up to 277 bits as fixed point, a float64 partial
// 2100, or an expansion of up to n float64s, on the wire and in every
// step's arithmetic. Gathering each block's raw inputs at its owner
// needs no wider wire format and one exact computation per element.
// The price is the pairwise pattern's: every rank talks to every other
// at once, which large jobs pay for in connections and small messages;
// and the owner holds a receive slot of every peer while the kernel
// reads them together.
//
// GOCOLL_ALGO (Options.Algos) does not apply to ExactSum: no other
// algorithm would give the same bits, which is the point, so a forced
// algorithm is kept for the other ops and ExactSum runs this one. A job
// of one rank still passes its input through the kernel, so a NaN comes
// out canonical there too.
//
// Integers: ExactSum is Sum (already exact modulo wrap-around), and takes
// Sum's algorithms.

// exactFloat says whether op on dt is computed here; exactOp is the op
// the other paths see (Sum, for an integer ExactSum).
func exactFloat(dt reduce.DType, op reduce.Op) bool {
	return op == reduce.ExactSum && dt.IsFloat()
}

func exactOp(op reduce.Op) reduce.Op {
	if op == reduce.ExactSum {
		return reduce.Sum
	}
	return op
}

// chooseExact is the algorithm of an exact sum of kind: a row of the
// choice table (see rules), logged as every choice is.
func (g *Group) chooseExact(kind Kind) Algo {
	return g.decide(shape{kind: kind, n: g.n, exact: true})
}

// exactAllReduce is AllReduce for ExactSum on a float type.
func (g *Group) exactAllReduce(ctx context.Context, buf []byte, count int, dt reduce.DType) error {
	algo := g.chooseExact(AllReduce)
	c := g.newCall(ctx, spec{what: tag(AllReduce, algo, dt, reduce.ExactSum), count: uint64(count)})
	if algo == Local {
		reduce.Exact(dt, buf, [][]byte{buf})
		return nil
	}
	n, r, es := g.n, g.rank, dt.Size()
	block := func(q int) []byte { return chunk(buf, count, n, q, es) }
	if err := c.exactReduceScatter(block, block(r), dt); err != nil {
		return err
	}
	return c.directAllGather(block)
}

// directAllGather sends block(rank) to every other rank and receives
// every other rank's block into block(q): the ring allgather's bytes, in
// one step of n-1 concurrent messages instead of n-1 dependent ones, like
// the reduce-scatter before it, pipelined by message in the same way.
func (c *call) directAllGather(block func(q int) []byte) error {
	n, r := c.g.n, c.g.rank
	mine := block(r)
	rounds := 0
	for q := 0; q < n; q++ {
		rounds = max(rounds, c.segments(len(block(q))))
	}
	for k := 0; k < rounds; k++ {
		if k < c.segments(len(mine)) {
			for s := 1; s < n; s++ {
				if err := c.send(mod(r+s, n), c.seg(mine, k)); err != nil {
					return err
				}
			}
		}
		for s := 1; s < n; s++ {
			from := mod(r-s, n)
			b := block(from)
			if k >= c.segments(len(b)) {
				continue
			}
			dst := c.seg(b, k)
			msg, err := c.recv(from, len(dst))
			if err != nil {
				return err
			}
			copy(dst, msg.Data)
			c.release(msg)
		}
	}
	return nil
}

// exactReduceScatter is pairwiseReduceScatter with the exact kernel: it
// sends block(q) of this rank's input to rank q, for every q, and writes
// the exact sum of the n ranks' inputs of its own block, rounded once,
// into out (which may be block(rank)). It is pipelined by message as
// pairwiseReduceScatter is. The kernel reads the peers' segments of a
// round in their receive slots, one slot per peer held until it is done
// (a peer's segment that is not aligned for dt is copied out first): a
// rank is at most one round ahead of any peer, so every peer's round-k
// segment can be sent while round k-1's slots are free again, whatever
// the slot count; and no rank sends while it holds a slot.
func (c *call) exactReduceScatter(block func(q int) []byte, out []byte, dt reduce.DType) error {
	n, r := c.g.n, c.g.rank
	mine := block(r)
	rounds := 0
	for q := 0; q < n; q++ {
		rounds = max(rounds, c.segments(len(block(q))))
	}
	seg := min(len(mine), c.segMax)
	stage, handle := getScratch(n * seg)
	defer putScratch(handle)
	ins := make([][]byte, n)
	held := make([]transport.Message, 0, n-1)
	for k := 0; k < rounds; k++ {
		for s := 1; s < n; s++ {
			to := mod(r+s, n)
			if b := block(to); k < c.segments(len(b)) {
				if err := c.send(to, c.seg(b, k)); err != nil {
					return err
				}
			}
		}
		if k >= c.segments(len(mine)) {
			continue
		}
		own := c.seg(mine, k)
		h := len(own)
		for q := 0; q < n; q++ {
			if q == r {
				ins[q] = own
				continue
			}
			msg, err := c.recv(q, h)
			if err != nil {
				c.releaseAll(held)
				return err
			}
			if !reduce.ExactAligned(dt, msg.Data) {
				ins[q] = stage[q*h : (q+1)*h : (q+1)*h]
				copy(ins[q], msg.Data)
				c.release(msg)
				continue
			}
			ins[q] = msg.Data
			held = append(held, msg)
		}
		reduce.Exact(dt, c.seg(out, k), ins)
		c.releaseAll(held)
		held = held[:0]
	}
	return nil
}

// releaseAll releases msgs, received from different peers.
func (c *call) releaseAll(msgs []transport.Message) {
	for _, m := range msgs {
		c.release(m)
	}
}

// exactReduce is Reduce for ExactSum on a float type: the exact
// reduce-scatter of send's blocks, then every rank's block to the root.
func (g *Group) exactReduce(ctx context.Context, send, recv []byte, count int, dt reduce.DType, root int) error {
	algo := g.chooseExact(Reduce)
	c := g.newCall(ctx, spec{what: tag(Reduce, algo, dt, reduce.ExactSum), count: uint64(count), root: uint32(root)})
	if algo == Local {
		reduce.Exact(dt, recv, [][]byte{send})
		return nil
	}
	n, r, es := g.n, g.rank, dt.Size()
	block := func(q int) []byte { return chunk(send, count, n, q, es) }
	if r != root {
		res, handle := getScratch(len(block(r)))
		defer putScratch(handle)
		if err := c.exactReduceScatter(block, res, dt); err != nil {
			return err
		}
		if err := c.sendAll(root, res); err != nil {
			return err
		}
		return c.receipts(root, nil)
	}
	// recv may be send: block r of the result lands where block r of
	// the input was, read by then, and the other blocks after every
	// round has sent them.
	if err := c.exactReduceScatter(block, chunk(recv, count, n, r, es), dt); err != nil {
		return err
	}
	others := make([]int, 0, n-1)
	for q := 0; q < n; q++ {
		if q == r {
			continue
		}
		others = append(others, q)
		if err := c.recvAll(q, chunk(recv, count, n, q, es), func(dst, src []byte) { copy(dst, src) }); err != nil {
			return err
		}
	}
	return c.receipts(-1, others)
}

// exactReduceScatterOrLocal is ReduceScatter and ReduceScatterV for
// ExactSum on a float type, block(q) being block q of send: on one rank,
// recv is send passed through the kernel.
func (c *call) exactReduceScatterOrLocal(block func(q int) []byte, send, recv []byte, dt reduce.DType) error {
	if c.g.n == 1 {
		reduce.Exact(dt, recv, [][]byte{send})
		return nil
	}
	return c.exactReduceScatter(block, recv, dt)
}
