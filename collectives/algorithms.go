package collectives

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/internal/reduce"
)

func mod(a, n int) int { return ((a % n) + n) % n }

// chunk is the byte range of the i-th of n near-equal parts of count
// elements of size es; the first count%n parts have one element more.
func chunk(b []byte, count, n, i, es int) []byte {
	q, r := count/n, count%n
	lo := i*q + min(i, r)
	hi := lo + q
	if i < r {
		hi++
	}
	return b[lo*es : hi*es : hi*es]
}

// AllReduce reduces buf element-wise across all ranks, in place: on return
// every rank holds the same bytes.
func (g *Group) AllReduce(ctx context.Context, buf []byte, dt reduce.DType, op reduce.Op) error {
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	// checkLen, by hand: not inlined, it was a tenth of the instructions
	// above the transport of a small allreduce.
	count, whole := dt.Count(len(buf))
	if !whole {
		return lenError("allreduce", buf, dt)
	}
	algo := g.choose(AllReduce, len(buf))
	c := g.newCall(ctx, spec{what: tag(AllReduce, algo, dt, op), count: uint64(count)})
	var err error
	switch algo {
	case Local:
	case Ring:
		err = c.ringAllReduce(buf, count, dt, op)
	case RecursiveDoubling:
		err = c.recursiveDoubling(buf, dt, op)
	case Hier:
		err = c.hierAllReduce(buf, count, dt, op)
	case Rabenseifner:
		err = c.rabenseifner(buf, count, dt, op)
	case Tree:
		err = c.treeAllReduce(buf, dt, op)
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
		err := c.stream(next, prev, out, in, func(dst, src []byte) { reduce.Reduce(dt, op, dst, dst, src) })
		if err != nil {
			return err
		}
	}
	if op == reduce.Avg {
		reduce.Scale(dt, chunk(buf, count, n, r, es), n)
	}
	return c.ringAllGather(buf, count, es)
}

// ringAllGather passes chunks around the ring until every rank has all n;
// rank r starts with chunk r.
func (c *call) ringAllGather(buf []byte, count, es int) error {
	n, r := c.t.Size(), c.t.Rank()
	next, prev := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		out := chunk(buf, count, n, mod(r-s, n), es)
		in := chunk(buf, count, n, mod(r-s-1, n), es)
		if err := c.stream(next, prev, out, in, func(dst, src []byte) { copy(dst, src) }); err != nil {
			return err
		}
	}
	return nil
}

// stream sends out to next and receives in from prev, segment by segment,
// handing each received segment to land (which reduces or copies it into
// place straight from the receive slot). Each rank sends segment k before
// waiting for segment k, so the ring never waits on itself, and the
// transport's slots keep the next segments flowing while this one lands.
func (c *call) stream(next, prev int, out, in []byte, land func(dst, src []byte)) error {
	ns, nr := c.segments(len(out)), c.segments(len(in))
	for k := 0; k < max(ns, nr); k++ {
		if k < ns {
			if err := c.send(next, c.seg(out, k)); err != nil {
				return err
			}
		}
		if k < nr {
			dst := c.seg(in, k)
			msg, err := c.recv(prev, len(dst))
			if err != nil {
				return err
			}
			land(dst, msg.Data)
			c.release(msg)
		}
	}
	return nil
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
	return c.onPowerOfTwo(buf, dt, op, func(p int) error {
		r := c.t.Rank()
		for mask := 1; mask < p; mask <<= 1 {
			partner := r ^ mask
			err := c.stream(partner, partner, buf, buf, func(dst, src []byte) { combine(dt, op, partner < r, dst, src) })
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
		combine(dt, op, partner < r, buf, msg.Data)
		c.release(msg)
	}
	return nil
}

// onPowerOfTwo runs core, an allreduce of buf among the first p ranks (p
// the largest power of two <= n), after folding each rank r >= p into rank
// r-p and before handing the result back to it.
func (c *call) onPowerOfTwo(buf []byte, dt reduce.DType, op reduce.Op, core func(p int) error) error {
	n, r := c.t.Size(), c.t.Rank()
	p := 1
	for p*2 <= n {
		p *= 2
	}
	if r >= p {
		if err := c.sendAll(r-p, buf); err != nil {
			return err
		}
		return c.recvAll(r-p, buf, func(dst, src []byte) { copy(dst, src) })
	}
	if r+p < n {
		if err := c.recvAll(r+p, buf, func(dst, src []byte) { combine(dt, op, false, dst, src) }); err != nil {
			return err
		}
	}
	if err := core(p); err != nil {
		return err
	}
	if r+p < n {
		return c.sendAll(r+p, buf)
	}
	return nil
}

// combine reduces a peer's data src into ours, dst, as lower-rank op
// higher-rank, so both sides of an exchange compute the same bits, NaN
// payloads included. It is called from closures written at each call
// site, which stay on the stack: a closure returned from a helper would
// be allocated on every collective.
func combine(dt reduce.DType, op reduce.Op, peerLower bool, dst, src []byte) {
	if peerLower {
		reduce.Reduce(dt, op, dst, src, dst)
	} else {
		reduce.Reduce(dt, op, dst, dst, src)
	}
}

func (c *call) sendAll(peer int, b []byte) error {
	for k := 0; k < c.segments(len(b)); k++ {
		if err := c.send(peer, c.seg(b, k)); err != nil {
			return err
		}
	}
	return nil
}

func (c *call) recvAll(peer int, b []byte, land func(dst, src []byte)) error {
	for k := 0; k < c.segments(len(b)); k++ {
		dst := c.seg(b, k)
		msg, err := c.recv(peer, len(dst))
		if err != nil {
			return err
		}
		land(dst, msg.Data)
		c.release(msg)
	}
	return nil
}

// Broadcast copies root's buf into every other rank's buf.
func (g *Group) Broadcast(ctx context.Context, buf []byte, dt reduce.DType, root int) error {
	n := g.t.Size()
	if root < 0 || root >= n {
		return fmt.Errorf("broadcast: root %d out of range [0, %d)", root, n)
	}
	count, err := checkLen("broadcast", buf, dt)
	if err != nil {
		return err
	}
	algo := g.choose(Broadcast, len(buf))
	c := g.newCall(ctx, spec{what: tag(Broadcast, algo, dt, 0), count: uint64(count), root: uint32(root)})
	vr := mod(g.t.Rank()-root, n)
	real := func(v int) int { return mod(v+root, n) }
	parent := -1
	var children []int
	switch algo {
	case Local:
		return nil
	case Binomial:
		// The parent of vr clears its lowest set bit; its children add the
		// powers of two below that bit, farthest first.
		low := n
		if vr != 0 {
			low = vr & -vr
			parent = real(vr - low)
		}
		for m := 1; m < low && vr+m < n; m <<= 1 {
			children = append([]int{real(vr + m)}, children...)
		}
	case Chain:
		if vr > 0 {
			parent = real(vr - 1)
		}
		if vr < n-1 {
			children = []int{real(vr + 1)}
		}
	default:
		return fmt.Errorf("broadcast: algorithm %v: %w", algo, ErrBadAlgo)
	}
	// Segment by segment: receive from the parent, pass on to the children,
	// so a long chain is a pipeline rather than n full copies in a row.
	for k := 0; k < c.segments(len(buf)); k++ {
		seg := c.seg(buf, k)
		if parent >= 0 {
			msg, err := c.recv(parent, len(seg))
			if err != nil {
				return err
			}
			copy(seg, msg.Data)
			c.release(msg)
		}
		for _, ch := range children {
			if err := c.send(ch, seg); err != nil {
				return err
			}
		}
	}
	return nil
}

// Barrier returns once every rank has entered it: in round k each rank
// signals rank r+2^k and waits for rank r-2^k, so after ceil(log2 n) rounds
// everyone has heard, directly or not, from everyone.
func (g *Group) Barrier(ctx context.Context) error {
	n, r := g.t.Size(), g.t.Rank()
	algo := g.choose(Barrier, 0)
	c := g.newCall(ctx, spec{what: tag(Barrier, algo, 0, 0)})
	if algo == Local {
		return nil
	}
	for d := 1; d < n; d <<= 1 {
		if err := c.send(mod(r+d, n), nil); err != nil {
			return err
		}
		msg, err := c.recv(mod(r-d, n), 0)
		if err != nil {
			return err
		}
		c.release(msg)
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
	copy(recv[r*len(send):], send)
	if algo == Local {
		return nil
	}
	return c.ringAllGather(recv, count*n, dt.Size())
}

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
	algo := g.choose(ReduceScatter, len(send))
	c := g.newCall(ctx, spec{what: tag(ReduceScatter, algo, dt, op), count: uint64(count)})
	block := func(b []byte, i int) []byte { return b[i*len(recv) : (i+1)*len(recv)] }
	if algo == Local {
		copy(recv, send)
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
				reduce.Reduce(dt, op, d, own[off:off+len(d)], src)
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
