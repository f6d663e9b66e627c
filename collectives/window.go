package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

// The single-copy allreduce, for buffers every rank of one host maps
// (comm.Alloc): rank r reads block r of every rank's buffer where it
// lies and reduces it into its own, then copies every other block from
// the buffer of the rank that reduced it. No byte goes through a slot:
// the transport carries only three empty messages per peer, which say
// when a buffer may be read (every rank is in the call: its input is in
// place), when a block is final, and when no peer reads this rank's
// buffer any more, so that the call may return and the caller write it.
// The first carries the call header, as in every collective, so a rank
// that called something else, or passed a buffer at another place of
// the window (the header's extra field), is caught before any byte is
// read.
//
// Each block is reduced in the ring's order (ringAllReduce: block k is
// x_k op (x_{k-1} op (... op (x_{k+2} op x_{k+1})))), with the same
// operands on each side and Avg divided by the owner, so that the result
// has the ring's bits, to the last one, for every type and op this path
// takes. reduce.ReduceN does it in one pass over the n inputs, the
// partial results kept in registers (or in a piece of scratch that
// stays in cache): each input is read once and only the rank's own
// buffer is written.

// SingleCopyFits says whether an allreduce of dt and op can take the
// single-copy path: a valid pair on several ranks of one host, not an
// ExactSum of floats (which has an algorithm of its own) nor a 16-bit
// reduction with float32 partial results (wide.go), and no allreduce
// algorithm forced (GOCOLL_ALGO: the forced one runs instead).
func (g *Group) SingleCopyFits(dt reduce.DType, op reduce.Op) bool {
	if reduce.Check(dt, op) != nil || g.n < 2 || g.hier || g.forced[AllReduce] != Auto || exactFloat(dt, op) {
		return false
	}
	return !g.wideFor(dt, exactOp(op))
}

// SingleCopyAllReduce reduces views[g.Rank()] across the ranks in place,
// reading views[q], rank q's buffer as this rank maps it, straight from
// memory: every view has the same length, on every rank. where tells
// apart buffers at different places of the ranks' shared memory: ranks
// that pass different values fail with ErrMismatch. The caller checks
// SingleCopyFits first; the result has the bits the ring's would.
// Below Options.SingleCopyMin bytes the table's other rows choose
// (rules, choose.go), and views[g.Rank()] is reduced as AllReduce
// would reduce it, with that algorithm's bits.
func (g *Group) SingleCopyAllReduce(ctx context.Context, views [][]byte, dt reduce.DType, op reduce.Op, where uint32) error {
	if !g.SingleCopyFits(dt, op) {
		return fmt.Errorf("allreduce: no single-copy path for %v %v on %d ranks: %w", dt, op, g.n, ErrBadAlgo)
	}
	if len(views) != g.n {
		return fmt.Errorf("allreduce: %d buffers for %d ranks: %w", len(views), g.n, ErrBadAlgo)
	}
	buf := views[g.rank]
	for q, v := range views {
		if len(v) != len(buf) {
			return fmt.Errorf("allreduce: rank %d's buffer has %d bytes, this rank's %d: %w", q, len(v), len(buf), ErrBadAlgo)
		}
	}
	count, whole := dt.Count(len(buf))
	if !whole {
		return lenError("allreduce", buf, dt)
	}
	op = exactOp(op)
	if algo := g.decide(shape{kind: AllReduce, n: g.n, bytes: len(buf), mapped: true}); algo != SingleCopy {
		return g.allReduceWith(ctx, algo, false, buf, count, dt, op)
	}
	c := g.newCall(ctx, spec{what: tag(AllReduce, SingleCopy, dt, op), count: uint64(count), extra: where})
	return c.singleCopy(views, count, dt, op)
}

func (c *call) singleCopy(views [][]byte, count int, dt reduce.DType, op reduce.Op) error {
	n, r, es := c.g.n, c.g.rank, dt.Size()
	own := views[r]
	// Every peer is in the call: its input is in place.
	if err := c.signalAll(); err != nil {
		return err
	}
	c.reduceBlock(views, count, dt, op)
	if op == reduce.Avg {
		reduce.Scale(dt, chunk(own, count, n, r, es), n)
	}
	// Block r is final; block q is once rank q says so, and rank q has
	// then read its inputs, this rank's block q among them, which this
	// rank may now overwrite.
	for s := 1; s < n; s++ {
		if err := c.send(mod(r+s, n), nil); err != nil {
			return err
		}
	}
	for s := 1; s < n; s++ {
		q := mod(r+s, n)
		if err := c.heard(q); err != nil {
			return err
		}
		c.copy(chunk(own, count, n, q, es), chunk(views[q], count, n, q, es))
	}
	// Once every peer has copied block r, the caller may write the buffer.
	return c.signalAll()
}

// signalAll sends every peer an empty message and waits for one from each.
func (c *call) signalAll() error {
	n, r := c.g.n, c.g.rank
	for s := 1; s < n; s++ {
		if err := c.send(mod(r+s, n), nil); err != nil {
			return err
		}
	}
	for s := 1; s < n; s++ {
		if err := c.heard(mod(r-s, n)); err != nil {
			return err
		}
	}
	return nil
}

// heard waits for the next (empty) message of this call from peer.
func (c *call) heard(peer int) error {
	msg, err := c.recv(peer, 0)
	if err != nil {
		return err
	}
	c.release(msg)
	return nil
}

// reduceBlock reduces this rank's block of every rank's buffer into its
// own, in the ring's order: ins[j] is rank r-j's block, so that ReduceN's
// x_r op (x_{r-1} op (... op x_{r+1})) is the ring's.
func (c *call) reduceBlock(views [][]byte, count int, dt reduce.DType, op reduce.Op) {
	n, r, es := c.g.n, c.g.rank, dt.Size()
	dst := chunk(views[r], count, n, r, es)
	if len(dst) == 0 {
		return
	}
	var inline [16][]byte
	ins := inline[:0]
	for j := range n {
		ins = append(ins, chunk(views[mod(r-j, n)], count, n, r, es))
	}
	c.reduceN(dt, op, dst, ins)
}
