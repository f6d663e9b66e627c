package collectives

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// Float16 and BFloat16 Sum, Avg and Prod accumulate in float32 (see
// reduce.Wide): every partial result that combines two or more ranks'
// inputs is kept, and travels, as float32, and the result is rounded to
// 16 bits once. The error of a sum is then one 16-bit rounding of the
// exact sum plus float32's own accumulation error, which is independent
// of the rank count at 16-bit precision, instead of one 16-bit rounding
// per step.
//
// What travels in which width follows from where a partial result
// exists:
//
//   - On two ranks every algorithm reduces each element once, from two
//     inputs exact in 16 bits, and reduce.Reduce computes that in float32
//     and rounds once: Sum and Prod take the 16-bit path, whose wire
//     traffic is the same. Avg, whose division must come before the one
//     rounding, does not (see wideFor).
//   - Pairwise (allreduce, reduce-scatter, reduce-scatter-v; chosen from
//     3 to 8 ranks, see the table in choose.go) sends every block once, in 16 bits,
//     to its owner, which sums the n inputs in float32 in rank order and
//     rounds once; the allreduce's allgather phase carries the rounded
//     16-bit chunks. The wire carries only 16 bits.
//   - The ring (allreduce, reduce-scatter, reduce-scatter-v) sends a
//     rank's own block in 16 bits at its first step (one rank's input is
//     exact in 16 bits), float32 partials at the later ones, and lands the
//     last step straight into the 16-bit result; the allgather phase
//     carries the rounded 16-bit chunks.
//   - Rabenseifner's reduce-scatter phase (recursive halving, and the fold
//     of the ranks beyond a power of two) runs on a float32 copy of the
//     buffer; each rank rounds the chunk it owns, and the allgather phase
//     and the fold-out carry 16 bits.
//   - The tree and the hierarchical allreduce (pipelined or not) reduce
//     in float32 up the tree (and among the leaders) and broadcast the
//     rounded 16 bits down.
//   - Recursive doubling, chosen for small buffers, runs entirely on a
//     float32 copy; every rank rounds the same float32 bits.
//   - Reduce sums up its tree in float32 and rounds at the root.
//   - The single copy (window.go) reduces each block from the n ranks'
//     16-bit buffers in one pass, in the ring's order and with its
//     roundings (reduce.ReduceNWide): the wide ring's bits; nothing
//     travels.
//
// Avg divides the float32 sum before the one rounding.
//
// Every rank must use the same widths, so the call header says so: the
// op byte carries wideBit, and a rank told to round in 16 bits
// (Options.Round16, GOCOLL_HALF_ACCUM=16bit), or of a build that always
// did, gets ErrMismatch rather than misread float32 bytes.

// wideBit marks, in the op byte of a call's header, a 16-bit reduction
// whose partial results travel as float32.
const wideBit = 0x80

// wideFor says whether a call takes the float32 path: a 16-bit Sum, Avg
// or Prod, on more than two ranks or for Avg (see above), unless the
// group was told to round in 16 bits (Options.Round16).
func (g *Group) wideFor(dt reduce.DType, op reduce.Op) bool {
	return reduce.Wide(dt, op) && (g.n > 2 || op == reduce.Avg) && !g.opts.Round16
}

// scratchPools hold float32 scratch buffers by size class (a power of
// two of 8-byte words), so that wide reductions allocate nothing in the
// steady state. The pool lets the garbage collector take buffers of a
// size no longer used, which a Group's own buffer would keep for its life.
var scratchPools [48]sync.Pool

// getScratch returns a buffer of n bytes, 8-byte aligned, and the handle
// to give back to putScratch when the call is done with it.
func getScratch(n int) ([]byte, *[]uint64) {
	words := max((n+7)/8, 1)
	class := bits.Len(uint(words - 1))
	p, _ := scratchPools[class].Get().(*[]uint64)
	if p == nil {
		w := make([]uint64, 1<<class)
		p = &w
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&(*p)[0])), len(*p)*8)[:n:n], p
}

func putScratch(p *[]uint64) {
	scratchPools[bits.Len(uint(len(*p)-1))].Put(p)
}

// finishWide turns a float32 result w into dt in out: divided by n first
// for Avg, then rounded once.
func finishWide(dt reduce.DType, op reduce.Op, out, w []byte, n int) {
	if op == reduce.Avg {
		reduce.Scale(reduce.Float32, w, n)
	}
	reduce.Narrow(dt, out, w)
}

// wideRing is the reduce-scatter ring with float32 partial results. The
// ring has n members; this rank is at position pos, sends to next and
// receives from prev. block(q) is this rank's 16-bit input of block q
// (blocks may differ in size; big is the largest, in bytes), and block
// pos of the result lands, rounded once, in out (which may be
// block(pos)). Step s sends block pos-s-1 and receives block pos-s-2, as
// the ring of ringAllReduce and ReduceScatter does: at step 0 a rank's
// own 16-bit input, later the float32 partial it computed the step
// before. avgBy is the divisor for Avg.
func (c *call) wideRing(next, prev, pos, n int, block func(q int) []byte, big int, out []byte, dt reduce.DType, op reduce.Op, avgBy int) error {
	// Two float32 blocks: one being sent while the other fills.
	scratch, handle := getScratch(4 * big)
	defer putScratch(handle)
	tmp := [2][]byte{scratch[:2*big], scratch[2*big:]}
	for s := 0; s < n-1; s++ {
		sent, got := mod(pos-s-1, n), mod(pos-s-2, n)
		own := block(got)
		last := s == n-2
		acc := tmp[s%2][:2*len(own)] // where a float32 result of this step goes
		off := 0                     // bytes of own landed so far
		var err error
		switch {
		case s == 0:
			err = c.stream(next, prev, block(sent), own, func(d, src []byte) {
				reduce.ReduceWide(dt, op, acc[2*off:2*(off+len(d))], d, src)
				c.tally.reduced(2*len(d), 2*len(d))
				off += len(d)
			})
		case last && op != reduce.Avg:
			err = c.stream(next, prev, tmp[(s-1)%2][:2*len(block(sent))], acc, func(d, src []byte) {
				h := len(d) / 2
				reduce.AccumulateNarrow(dt, op, out[off:off+h], src, own[off:off+h])
				c.tally.reduced(3*h, h)
				off += h
			})
		default:
			err = c.stream(next, prev, tmp[(s-1)%2][:2*len(block(sent))], acc, func(d, src []byte) {
				h := len(d) / 2
				reduce.Accumulate(dt, op, d, src, own[off:off+h])
				c.tally.reduced(3*h, 2*h)
				off += h
			})
		}
		if err != nil {
			return err
		}
		if last && op == reduce.Avg {
			finishWide(dt, op, out, acc, avgBy)
		}
	}
	return nil
}

// ringAllReduceWide is ringAllReduce with float32 partial results: the
// reduce-scatter ring of wideRing leaves chunk r, rounded, in buf, and
// the allgather shares the 16-bit chunks.
func (c *call) ringAllReduceWide(buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	n, r := c.t.Size(), c.t.Rank()
	block := func(q int) []byte { return chunk(buf, count, n, q, 2) }
	if err := c.wideRing(mod(r+1, n), mod(r-1, n), r, n, block, len(block(0)), block(r), dt, op, n); err != nil {
		return err
	}
	return c.ringAllGather(buf, count, 2)
}

// allReduceWide runs algo on a 16-bit Sum, Avg or Prod with float32
// partial results (see the top of this file), Avg's division included.
func (c *call) allReduceWide(algo Algo, buf []byte, count int, dt reduce.DType, op reduce.Op) error {
	switch algo {
	case Ring:
		return c.ringAllReduceWide(buf, count, dt, op)
	case Pairwise:
		return c.pairwiseAllReduce(buf, count, dt, op, true)
	}
	n := c.t.Size()
	w, handle := getScratch(2 * len(buf))
	defer putScratch(handle)
	reduce.Widen(dt, w, buf)
	switch algo {
	case RecursiveDoubling:
		if err := c.recursiveDoubling(w, reduce.Float32, op); err != nil {
			return err
		}
		finishWide(dt, op, buf, w, n)
		return nil
	case Rabenseifner:
		return c.rabenseifnerWide(buf, w, count, dt, op)
	case Tree:
		parent, children := c.g.tree(0)
		if err := c.reduceUp(w, reduce.Float32, op, parent, children); err != nil {
			return err
		}
		if parent < 0 {
			finishWide(dt, op, buf, w, n)
		}
		return c.spreadDown(buf, parent, children)
	case Hier:
		return c.hierAllReduceWide(buf, w, count, dt, op)
	case HierPipe:
		n := c.t.Size()
		return c.hierPipe(w, buf, count, reduce.Float32, op, func(down, up []byte) { finishWide(dt, op, down, up, n) })
	}
	panic("collectives: allReduceWide: algorithm " + algo.String())
}

// rabenseifnerWide is rabenseifner on the float32 copy w of buf: each
// rank rounds the chunk it ends the halving phase with into buf, and the
// doubling phase and the fold-out carry 16 bits.
func (c *call) rabenseifnerWide(buf, w []byte, count int, dt reduce.DType, op reduce.Op) error {
	n := c.t.Size()
	return c.halvingDoubling(w, buf, count, reduce.Float32, op, func(h, f []byte) { finishWide(dt, op, f, h, n) })
}

// hierAllReduceWide is hierAllReduce on the float32 copy w of buf: the
// leaders round the result into buf and broadcast 16 bits inside their
// hosts.
func (c *call) hierAllReduceWide(buf, w []byte, count int, dt reduce.DType, op reduce.Op) error {
	n := c.t.Size()
	return c.hierUpDown(w, buf, count, reduce.Float32, op, func(down, up []byte) { finishWide(dt, op, down, up, n) })
}

// pairwiseAllReduce is the pairwise reduce-scatter, which leaves chunk r
// reduced (and, if wide, rounded once) in buf, then the ring allgather of
// the chunks.
func (c *call) pairwiseAllReduce(buf []byte, count int, dt reduce.DType, op reduce.Op, wide bool) error {
	n, r, es := c.g.n, c.g.rank, dt.Size()
	block := func(q int) []byte { return chunk(buf, count, n, q, es) }
	if err := c.pairwiseReduceScatter(block, block(r), dt, op, wide); err != nil {
		return err
	}
	return c.ringAllGather(buf, count, es)
}

// pairwiseReduceScatter sends block(q) of this rank's input to rank q,
// for every q, and reduces the n ranks' inputs of its own block into out
// (which may be block(rank)), Avg's division included. wide says the
// inputs are 16-bit and reduce in float32, rounded once.
//
// Every block travels once, in its input width, straight to its owner:
// per rank, n-1 sends and receives of a block, the bytes of a 16-bit ring
// reduce-scatter. It is pipelined by message (segMax): in round k a rank
// sends segment k of every peer's block, then reduces segment k of its
// own. The owner reduces in rank order, 0 to n-1, receiving each peer's
// segment when its turn comes and releasing it once added, so the
// result does not depend on which message came first: the bits are the
// same from run to run, and, as one rank computes each block, on every
// rank. Memory: one segment's accumulator (float32 if wide) and at most
// two receive slots held at a time (inputs 0 and 1, for the first
// reduction); peers' segments that arrive before their turn wait in the
// transport's slots, as in the ring. The n inputs are not staged in
// 16 bits first: that is n-1 blocks of memory and a copy each, for an
// order the rank-ordered receive already gives. Two variants measured no
// better (3-4 ranks, 5 alternating rounds, 256 KiB-16 MiB, median
// ratios against this): receiving in the order the peers send (r-1
// first), holding every slot, then reducing in rank order (shm,
// 0.74-1.04x); and smaller messages for a deeper pipeline (a quarter of
// segMax, or a quarter block of at least 64 KiB): up to 1.5x on shm at
// 1 MiB but 0.55-1.06x over tcp.
//
// A rank is at most one round ahead of any peer (it cannot finish round
// k before every peer sent segment k), so each peer has at most two of
// its segments unreceived, as in stream; and a sender that waits for
// credits reads its peer's stream meanwhile (see Mux).
func (c *call) pairwiseReduceScatter(block func(q int) []byte, out []byte, dt reduce.DType, op reduce.Op, wide bool) error {
	n, r := c.g.n, c.g.rank
	mine := block(r)
	rounds := 0
	for q := 0; q < n; q++ {
		rounds = max(rounds, c.segments(len(block(q))))
	}
	accLen := min(len(mine), c.segMax)
	if wide {
		accLen *= 2
	}
	acc, handle := getScratch(accLen)
	defer putScratch(handle)
	for k := 0; k < rounds; k++ {
		for s := 1; s < n; s++ {
			to := mod(r+s, n)
			if b := block(to); k < c.segments(len(b)) {
				if err := c.send(to, c.seg(b, k)); err != nil {
					return err
				}
			}
		}
		if k < c.segments(len(mine)) {
			if err := c.reduceInOrder(c.seg(mine, k), c.seg(out, k), acc, dt, op, wide); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceInOrder receives every peer's segment of this rank's block and
// reduces the n segments (own being this rank's) in rank order into out,
// through acc (see pairwiseReduceScatter).
func (c *call) reduceInOrder(own, out, acc []byte, dt reduce.DType, op reduce.Op, wide bool) error {
	n, r, h := c.g.n, c.g.rank, len(own)
	if wide {
		acc = acc[:2*h]
	} else {
		acc = acc[:h]
	}
	var first []byte // input 0, until input 1 is here
	var firstMsg transport.Message
	held, rounded := false, false
	for q := 0; q < n; q++ {
		in := own
		var msg transport.Message
		if q != r {
			var err error
			if msg, err = c.recv(q, h); err != nil {
				if held {
					c.release(firstMsg)
				}
				return err
			}
			in = msg.Data
		}
		if q == 0 {
			first, firstMsg, held = in, msg, q != r
			continue
		}
		last := q == n-1
		switch {
		case wide && q == 1:
			reduce.ReduceWide(dt, op, acc, first, in)
			c.tally.reduced(2*len(in), 2*len(in))
		case wide && last && op != reduce.Avg:
			reduce.AccumulateNarrow(dt, op, out, acc, in)
			c.tally.reduced(3*len(in), len(in))
			rounded = true
		case wide:
			reduce.Accumulate(dt, op, acc, acc, in)
			c.tally.reduced(3*len(in), 2*len(in))
		case q == 1 && last:
			c.reduce(dt, op, out, first, in)
		case q == 1:
			c.reduce(dt, op, acc, first, in)
		case last:
			c.reduce(dt, op, out, acc, in)
		default:
			c.reduce(dt, op, acc, acc, in)
		}
		if held {
			c.release(firstMsg)
			held = false
		}
		if q != r {
			c.release(msg)
		}
	}
	switch {
	case wide && !rounded:
		finishWide(dt, op, out, acc, n)
	case !wide && op == reduce.Avg:
		reduce.Scale(dt, out, n)
	}
	return nil
}
