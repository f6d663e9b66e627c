package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// The single-copy allreduce, for buffers every rank of one host maps
// (comm.Alloc) or reads through a PeerReader (comm.Register): rank r
// reads block r of every rank's buffer where it lies and reduces it
// into its own, then copies every other block from the buffer of the
// rank that reduced it. No byte goes through a slot:
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
// buffer is written. A 16-bit Sum, Avg or Prod with float32 partial
// results (wideFor) goes through reduce.ReduceNWide instead, which
// takes the wide ring's steps (wideRing) in the same order: the first
// two inputs summed in float32, the others added in float32, the last
// one with the one rounding to 16 bits (Avg: divided in float32 first,
// by the owner), so the result has the wide ring's bits. That is not
// the bits of the pairwise reduce-scatter, which the table picks for
// such data on 3 to 8 ranks otherwise and which sums in rank order.

// SingleCopyAllReduce reduces views[g.Rank()] across the ranks in place,
// reading views[q], rank q's buffer as this rank maps it, straight from
// memory: every view has the same length, on every rank. where tells
// apart buffers at different places of the ranks' shared memory: ranks
// that pass different values fail with ErrMismatch. Whether the single
// copy runs is a row of the algorithm table (rules, choose.go), whose
// reason GOCOLL_DEBUG=info logs: from Options.SingleCopyMin bytes, on
// several ranks of one host, with no allreduce algorithm forced
// (GOCOLL_ALGO), not an ExactSum of floats; it then has the bits the
// ring's would (the wide ring's for 16-bit data with float32 partials).
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
	return g.singleCopyCall(ctx, memory{views: views, own: buf}, dt, op, where)
}

// PeerReader reads the other ranks' buffers where this rank cannot map
// them (comm.Register: the kernel copies from the peer's memory,
// process_vm_readv).
type PeerReader interface {
	// ReadPeer fills dst from rank q's buffer, from its byte off on.
	ReadPeer(q, off int, dst []byte) error
}

// SingleCopyAllReduceRead is SingleCopyAllReduce for buffers the ranks
// read through peers rather than map: buf is this rank's, of the same
// length on every rank, and peers reads the others'. Rank r reads each
// piece of every peer's block r into a scratch piece that stays in
// cache and reduces it from there, then reads every other block from the
// rank that reduced it straight into buf: each read is a copy, counted
// as Copied (docs/traffic.md). The table decides as for
// SingleCopyAllReduce, on up to Options.SingleCopyReadRanks ranks, and
// a failed read fails the call with a
// *transport.PeerError wrapping ErrPeerLost.
func (g *Group) SingleCopyAllReduceRead(ctx context.Context, buf []byte, peers PeerReader, dt reduce.DType, op reduce.Op, where uint32) error {
	return g.singleCopyCall(ctx, memory{own: buf, read: peers}, dt, op, where)
}

// singleCopyCall checks an allreduce of m.own, which every rank can
// read, and asks the table for its algorithm: the single copy on m, or
// the one chosen on m.own. Whether the call takes the float32 path is
// decided here, once, and handed down.
func (g *Group) singleCopyCall(ctx context.Context, m memory, dt reduce.DType, op reduce.Op, where uint32) error {
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	count, whole := dt.Count(len(m.own))
	if !whole {
		return lenError("allreduce", m.own, dt)
	}
	s := shape{kind: AllReduce, n: g.n, bytes: len(m.own), exact: exactFloat(dt, op), mapped: true, read: m.read != nil}
	op = exactOp(op)
	if !s.exact {
		s.wide = g.wideFor(dt, op)
	}
	switch algo := g.decide(s); {
	case algo == SingleCopy:
		c := g.newCall(ctx, spec{what: tag(AllReduce, SingleCopy, dt, op), count: uint64(count), extra: where})
		return c.singleCopy(m, count, dt, op, s.wide)
	case s.exact:
		return g.exactAllReduce(ctx, m.own, count, dt)
	default:
		return g.allReduceWith(ctx, algo, s.wide, m.own, count, dt, op)
	}
}

// memory is the ranks' buffers as the single copy reaches them: mapped,
// views[q] rank q's, or read through read; own is this rank's.
type memory struct {
	views [][]byte
	own   []byte
	read  PeerReader
}

// gather copies block q, final, from rank q's buffer into this rank's.
func (c *call) gather(m memory, count int, q, es int) error {
	dst := chunk(m.own, count, c.g.n, q, es)
	if m.read == nil {
		c.copy(dst, chunk(m.views[q], count, c.g.n, q, es))
		return nil
	}
	lo, _ := span(count, c.g.n, q)
	return c.readPeer(m.read, q, lo*es, dst)
}

// readPeer is m.read.ReadPeer, counted as a copy.
func (c *call) readPeer(read PeerReader, q, off int, dst []byte) error {
	if err := read.ReadPeer(q, off, dst); err != nil {
		return &transport.PeerError{Peer: q, Op: "read the registered buffer of", Err: fmt.Errorf("%w: %w", transport.ErrPeerLost, err)}
	}
	c.tally.copying(len(dst))
	return nil
}

// singleCopy is the single copy of m, on float32 partial results if wide
// (wideFor).
func (c *call) singleCopy(m memory, count int, dt reduce.DType, op reduce.Op, wide bool) error {
	n, r, es := c.g.n, c.g.rank, dt.Size()
	own := m.own
	// Every peer is in the call: its input is in place.
	if err := c.signalAll(); err != nil {
		return err
	}
	if m.read == nil {
		c.reduceBlock(m.views, count, dt, op, wide)
	} else if err := c.readBlock(m.read, own, count, dt, op, wide); err != nil {
		return err
	}
	if op == reduce.Avg && !wide {
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
		if err := c.gather(m, count, q, es); err != nil {
			return err
		}
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
func (c *call) reduceBlock(views [][]byte, count int, dt reduce.DType, op reduce.Op, wide bool) {
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
	c.reduceN(wide, dt, op, dst, ins)
}

// readBlock is reduceBlock for buffers read through a PeerReader: a
// piece of every peer's block r at a time is read into scratch, and
// ReduceN reduces the pieces, in the ring's order, into own.
func (c *call) readBlock(read PeerReader, own []byte, count int, dt reduce.DType, op reduce.Op, wide bool) error {
	n, k, es := c.g.n, c.g.rank, dt.Size()
	dst := chunk(own, count, n, k, es)
	if len(dst) == 0 {
		return nil
	}
	lo, _ := span(count, n, k)
	piece := min(readPiece(n), len(dst))
	scratch, h := getScratch((n - 1) * piece)
	defer putScratch(h)
	// slot(j) holds the piece of rank k-j's block (j = 1..n-1).
	slot := func(j, size int) []byte { return scratch[(j-1)*piece:][:size] }
	var inline [16][]byte
	for at := 0; at < len(dst); at += piece {
		end := min(at+piece, len(dst))
		ins := append(inline[:0], dst[at:end])
		for j := 1; j < n; j++ {
			if err := c.readPeer(read, mod(k-j, n), lo*es+at, slot(j, end-at)); err != nil {
				return err
			}
			ins = append(ins, slot(j, end-at))
		}
		c.reduceN(wide, dt, op, dst[at:end], ins)
	}
	return nil
}

// readPiece is how much of each peer's block readBlock reads at a time:
// 64 KiB, less on many ranks so that the n-1 pieces stay within about
// 512 KiB of cache; a multiple of 4 KiB.
func readPiece(n int) int {
	return max(4<<10, min(64<<10, (512<<10)/n&^(4<<10-1)))
}
