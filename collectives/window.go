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
// takes. The partial results live in a scratch piece small enough to
// stay in cache; only the last step writes the rank's own buffer.

// singleCopyPiece is how much of a block is reduced through the chain
// at a time: the scratch of partial results, which stays in cache. A
// multiple of every element size.
const singleCopyPiece = 64 << 10

// SingleCopyAllReduce reduces views[g.Rank()] across the ranks in place,
// reading views[q], rank q's buffer as this rank maps it, straight from
// memory: every view has the same length, on every rank. where tells
// apart buffers at different places of the ranks' shared memory: ranks
// that pass different values fail with ErrMismatch. Whether the single
// copy runs is a row of the algorithm table (rules, choose.go), whose
// reason GOCOLL_DEBUG=info logs: from Options.SingleCopyMin bytes, on
// several ranks of one host, with no allreduce algorithm forced
// (GOCOLL_ALGO), neither an ExactSum of floats nor a 16-bit reduction
// with float32 partial results; it then has the bits the ring's would.
// Otherwise views[g.Rank()] is reduced as AllReduce would reduce it,
// with the bits of the algorithm the table chose.
func (g *Group) SingleCopyAllReduce(ctx context.Context, views [][]byte, dt reduce.DType, op reduce.Op, where uint32) error {
	if len(views) != g.n {
		return fmt.Errorf("allreduce: %d buffers for %d ranks: %w", len(views), g.n, ErrBadAlgo)
	}
	buf := views[g.rank]
	for q, v := range views {
		if len(v) != len(buf) {
			return fmt.Errorf("allreduce: rank %d's buffer has %d bytes, this rank's %d: %w", q, len(v), len(buf), ErrBadAlgo)
		}
	}
	count, op, algo, err := g.chooseMapped(ctx, buf, dt, op)
	if algo != SingleCopy {
		return err
	}
	c := g.newCall(ctx, spec{what: tag(AllReduce, SingleCopy, dt, op), count: uint64(count), extra: where})
	return c.singleCopy(views, count, dt, op)
}

// chooseMapped checks an allreduce of buf, which every rank can read,
// and asks the table for its algorithm. Unless that is SingleCopy, it
// runs the allreduce with the one chosen and returns its result.
func (g *Group) chooseMapped(ctx context.Context, buf []byte, dt reduce.DType, op reduce.Op) (int, reduce.Op, Algo, error) {
	if err := reduce.Check(dt, op); err != nil {
		return 0, op, Auto, err
	}
	count, whole := dt.Count(len(buf))
	if !whole {
		return 0, op, Auto, lenError("allreduce", buf, dt)
	}
	s := shape{kind: AllReduce, n: g.n, bytes: len(buf), exact: exactFloat(dt, op), mapped: true}
	op = exactOp(op)
	if !s.exact {
		s.wide = g.wideFor(dt, op)
	}
	switch algo := g.decide(s); {
	case algo == SingleCopy:
		return count, op, algo, nil
	case s.exact:
		return count, op, algo, g.exactAllReduce(ctx, buf, count, dt)
	default:
		return count, op, algo, g.allReduceWith(ctx, algo, s.wide, buf, count, dt, op)
	}
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
// own, in the ring's order: the partial results go through scratch, a
// piece at a time, and the last step, x_r op partial, writes the buffer.
func (c *call) reduceBlock(views [][]byte, count int, dt reduce.DType, op reduce.Op) {
	n, k, es := c.g.n, c.g.rank, dt.Size()
	dst := chunk(views[k], count, n, k, es)
	if len(dst) == 0 {
		return
	}
	in := func(j int) []byte { return chunk(views[mod(k+j, n)], count, n, k, es) }
	if n == 2 {
		c.reduce(dt, op, dst, dst, in(1))
		return
	}
	scratch, h := getScratch(min(singleCopyPiece, len(dst)))
	defer putScratch(h)
	for at := 0; at < len(dst); at += singleCopyPiece {
		end := min(at+singleCopyPiece, len(dst))
		acc := scratch[:end-at]
		c.reduce(dt, op, acc, in(2)[at:end], in(1)[at:end])
		for j := 3; j < n; j++ {
			c.reduce(dt, op, acc, in(j)[at:end], acc)
		}
		c.reduce(dt, op, dst[at:end], dst[at:end], acc)
	}
}
