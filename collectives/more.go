package collectives

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/gocoll/gocoll/internal/reduce"
)

// The rest of the collective set. Their values follow ReduceScatter's and
// are fixed, because they travel in the call header.
const (
	// Reduce combines every rank's buffer into the root's.
	Reduce Kind = iota + 6
	// Gather concatenates every rank's buffer, in rank order, at the root.
	Gather
	// Scatter hands block q of the root's buffer to rank q.
	Scatter
	// AllGatherV is AllGather with a count per rank.
	AllGatherV
	// ReduceScatterV is ReduceScatter with a count per rank.
	ReduceScatterV
	// AllToAll sends block q of every rank's buffer to rank q.
	AllToAll
	// AllToAllV is AllToAll with a count per (sender, receiver) pair.
	AllToAllV
)

// More algorithms. Their values are fixed, far from the iota block of
// group.go, because they travel in the call header.
const (
	// Linear: the root talks to every other rank in turn (gather, scatter).
	Linear Algo = iota + 32
	// Pairwise: n-1 exchange steps, rank r sending to r+s and receiving
	// from r-s in step s (all-to-all).
	Pairwise
	// Rabenseifner: allreduce as a recursive-halving reduce-scatter then a
	// recursive-doubling allgather: log2(n) steps like recursive doubling,
	// but each rank moves only 2(n-1)/n of the buffer like the ring.
	Rabenseifner
	// Tree: allreduce as a binomial-tree reduce to rank 0, then a
	// binomial-tree broadcast, both pipelined by segment.
	Tree
)

// ErrInvalid reports a bad argument, found before anything was sent.
var ErrInvalid = errors.New("invalid argument")

func init() {
	for k, name := range map[Kind]string{
		Reduce: "reduce", Gather: "gather", Scatter: "scatter", AllGatherV: "allgatherv",
		ReduceScatterV: "reducescatterv", AllToAll: "alltoall", AllToAllV: "alltoallv",
	} {
		kindNames[k] = name
	}
	for a, name := range map[Algo]string{Linear: "linear", Pairwise: "pairwise", Rabenseifner: "rabenseifner", Tree: "tree"} {
		algoNames[a] = name
	}
	algos[Reduce] = []Algo{Binomial}
	algos[Gather] = []Algo{Linear}
	algos[Scatter] = []Algo{Linear}
	algos[AllGatherV] = []Algo{Ring}
	algos[ReduceScatterV] = []Algo{Ring}
	algos[AllToAll] = []Algo{Pairwise}
	algos[AllToAllV] = []Algo{Pairwise}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// checkRoot refuses a root outside the group.
func (g *Group) checkRoot(what string, root int) error {
	if n := g.t.Size(); root < 0 || root >= n {
		return invalid("%s: root %d out of range [0, %d)", what, root, n)
	}
	return nil
}

// checkCounts refuses a count list that is not one non-negative count per
// rank, and returns the byte offsets of the blocks (n+1 of them).
func (g *Group) checkCounts(what, name string, counts []int, es int) ([]int, error) {
	n := g.t.Size()
	if len(counts) != n {
		return nil, invalid("%s: %d %s for %d ranks, want one per rank", what, len(counts), name, n)
	}
	offs := make([]int, n+1)
	for q, c := range counts {
		if c < 0 {
			return nil, invalid("%s: %s[%d] = %d is negative", what, name, q, c)
		}
		offs[q+1] = offs[q] + c*es
	}
	return offs, nil
}

// countsSum is the checksum of a count list that goes in the call header,
// so that ranks passing different lists get ErrMismatch, not garbage. It
// is never 0, which reads as "no counts".
func countsSum(counts []int) uint32 {
	h := fnv.New32a()
	var b [8]byte
	for _, c := range counts {
		for i := range b {
			b[i] = byte(uint64(c) >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum32() | 1
}

func total(counts []int) int {
	s := 0
	for _, c := range counts {
		s += c
	}
	return s
}

// tree is this rank's place in the binomial tree rooted at root: its
// parent (-1 at the root) and its children, nearest first. Reduce
// gathers up it and Broadcast spreads down it.
func (g *Group) tree(root int) (parent int, children []int) {
	n := g.t.Size()
	vr := mod(g.t.Rank()-root, n)
	real := func(v int) int { return mod(v+root, n) }
	parent = -1
	low := n
	if vr != 0 {
		low = vr & -vr
		parent = real(vr - low)
	}
	for m := 1; m < low && vr+m < n; m <<= 1 {
		children = append(children, real(vr+m))
	}
	return parent, children
}

// Reduce combines send element-wise across ranks with op into recv on the
// root. recv is only written on the root, where it must be as long as
// send (it may be send itself); elsewhere it is ignored.
func (g *Group) Reduce(ctx context.Context, send, recv []byte, dt reduce.DType, op reduce.Op, root int) error {
	if err := reduce.Check(dt, op); err != nil {
		return err
	}
	if err := g.checkRoot("reduce", root); err != nil {
		return err
	}
	count, err := checkLen("reduce", send, dt)
	if err != nil {
		return err
	}
	atRoot := g.t.Rank() == root
	if atRoot && len(recv) != len(send) {
		return invalid("reduce: receive buffer of %d bytes at the root, want %d like send", len(recv), len(send))
	}
	algo := g.choose(Reduce, len(send))
	c := g.newCall(ctx, spec{what: tag(Reduce, algo, dt, op), count: uint64(count), root: uint32(root)})
	acc := send
	parent, children := g.tree(root)
	switch {
	case atRoot:
		copy(recv, send)
		acc = recv
	case len(children) > 0:
		// An inner node must not write into send: it sums into scratch.
		acc = append([]byte(nil), send...)
	}
	if algo != Local {
		if err := c.reduceUp(acc, dt, op, parent, children); err != nil {
			return err
		}
	}
	if atRoot && op == reduce.Avg {
		reduce.Scale(dt, recv, g.t.Size())
	}
	return nil
}

// reduceUp folds the children's partial results into acc and passes acc
// to the parent, segment by segment, so that a deep tree is a pipeline.
// Each message is released before anything is sent, so a rank never holds
// a slot while it waits for a credit.
func (c *call) reduceUp(acc []byte, dt reduce.DType, op reduce.Op, parent int, children []int) error {
	for k := 0; k < c.segments(len(acc)); k++ {
		seg := c.seg(acc, k)
		for _, ch := range children {
			msg, err := c.recv(ch, len(seg))
			if err != nil {
				return err
			}
			reduce.Reduce(dt, op, seg, seg, msg.Data)
			c.release(msg)
		}
		if parent >= 0 {
			if err := c.send(parent, seg); err != nil {
				return err
			}
		}
	}
	return nil
}

// Gather concatenates every rank's send, in rank order, into recv on the
// root, where len(recv) must be Size()*len(send); elsewhere recv is
// ignored.
func (g *Group) Gather(ctx context.Context, send, recv []byte, dt reduce.DType, root int) error {
	if err := g.checkRoot("gather", root); err != nil {
		return err
	}
	count, err := checkLen("gather", send, dt)
	if err != nil {
		return err
	}
	n := g.t.Size()
	if g.t.Rank() == root && len(recv) != n*len(send) {
		return invalid("gather: receive buffer of %d bytes at the root, want %d ranks x %d bytes = %d", len(recv), n, len(send), n*len(send))
	}
	algo := g.choose(Gather, len(send)*n)
	c := g.newCall(ctx, spec{what: tag(Gather, algo, dt, 0), count: uint64(count), root: uint32(root)})
	if g.t.Rank() != root {
		return c.sendAll(root, send)
	}
	copy(recv[root*len(send):], send)
	for q := 0; q < n; q++ {
		if q == root {
			continue
		}
		block := recv[q*len(send) : (q+1)*len(send)]
		if err := c.recvAll(q, block, func(dst, src []byte) { copy(dst, src) }); err != nil {
			return err
		}
	}
	return nil
}

// Scatter hands block q of the root's send (Size() blocks of len(recv)
// bytes) to rank q's recv; send is ignored except on the root.
func (g *Group) Scatter(ctx context.Context, send, recv []byte, dt reduce.DType, root int) error {
	if err := g.checkRoot("scatter", root); err != nil {
		return err
	}
	count, err := checkLen("scatter", recv, dt)
	if err != nil {
		return err
	}
	n := g.t.Size()
	if g.t.Rank() == root && len(send) != n*len(recv) {
		return invalid("scatter: send buffer of %d bytes at the root, want %d ranks x %d bytes = %d", len(send), n, len(recv), n*len(recv))
	}
	algo := g.choose(Scatter, len(recv)*n)
	c := g.newCall(ctx, spec{what: tag(Scatter, algo, dt, 0), count: uint64(count), root: uint32(root)})
	if g.t.Rank() != root {
		return c.recvAll(root, recv, func(dst, src []byte) { copy(dst, src) })
	}
	for q := 0; q < n; q++ {
		if q == root {
			continue
		}
		if err := c.sendAll(q, send[q*len(recv):(q+1)*len(recv)]); err != nil {
			return err
		}
	}
	copy(recv, send[root*len(recv):(root+1)*len(recv)])
	return nil
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
	copy(recv[offs[r]:], send)
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
		if err := c.stream(next, prev, block(mod(r-s, n)), block(mod(r-s-1, n)), func(dst, src []byte) { copy(dst, src) }); err != nil {
			return err
		}
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
	algo := g.choose(ReduceScatterV, len(send))
	c := g.newCall(ctx, spec{what: tag(ReduceScatterV, algo, dt, op), count: uint64(total(counts)), extra: countsSum(counts)})
	block := func(b []byte, q int) []byte { return b[offs[q]:offs[q+1]] }
	if algo == Local {
		copy(recv, send)
	} else {
		// The ring of ReduceScatter with blocks of their own sizes: the
		// partial result in flight alternates between two scratch blocks
		// as large as the largest block, and the last step lands in recv.
		big := 0
		for q := 0; q < n; q++ {
			big = max(big, offs[q+1]-offs[q])
		}
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

// AllToAll sends block q of send to rank q, which puts it in block
// Rank() of its recv: send and recv hold Size() blocks of equal length.
func (g *Group) AllToAll(ctx context.Context, send, recv []byte, dt reduce.DType) error {
	if _, err := checkLen("alltoall", send, dt); err != nil {
		return err
	}
	n, es := g.t.Size(), dt.Size()
	if len(send)%(n*es) != 0 {
		return invalid("alltoall: send buffer of %d elements does not split into %d equal blocks", len(send)/es, n)
	}
	if len(recv) != len(send) {
		return invalid("alltoall: receive buffer of %d bytes, want %d like send", len(recv), len(send))
	}
	b := len(send) / n
	offs := make([]int, n+1)
	for q := range offs {
		offs[q] = q * b
	}
	algo := g.choose(AllToAll, len(send))
	c := g.newCall(ctx, spec{what: tag(AllToAll, algo, dt, 0), count: uint64(b / es)})
	return c.pairwise(send, recv, offs, offs)
}

// AllToAllV sends sendCounts[q] elements to rank q and receives
// recvCounts[q] from it; blocks lie in rank order in send and recv. What
// rank p sends to q must be what q expects from p.
func (g *Group) AllToAllV(ctx context.Context, send []byte, sendCounts []int, recv []byte, recvCounts []int, dt reduce.DType) error {
	if _, err := checkLen("alltoallv", send, dt); err != nil {
		return err
	}
	es := dt.Size()
	so, err := g.checkCounts("alltoallv", "sendCounts", sendCounts, es)
	if err != nil {
		return err
	}
	ro, err := g.checkCounts("alltoallv", "recvCounts", recvCounts, es)
	if err != nil {
		return err
	}
	n := g.t.Size()
	if len(send) != so[n] {
		return invalid("alltoallv: send buffer of %d elements, want the sum of sendCounts, %d", len(send)/es, total(sendCounts))
	}
	if len(recv) != ro[n] {
		return invalid("alltoallv: receive buffer of %d elements, want the sum of recvCounts, %d", len(recv)/es, total(recvCounts))
	}
	r := g.t.Rank()
	if sendCounts[r] != recvCounts[r] {
		return invalid("alltoallv: sendCounts[%d] = %d but recvCounts[%d] = %d: this rank's block to itself", r, sendCounts[r], r, recvCounts[r])
	}
	algo := g.choose(AllToAllV, len(send))
	// Counts differ between ranks, so only the kind and type are compared
	// up front; each block's length is checked as it arrives.
	c := g.newCall(ctx, spec{what: tag(AllToAllV, algo, dt, 0)})
	return c.pairwise(send, recv, so, ro)
}

// pairwise runs n-1 exchange steps: in step s rank r sends its block for
// r+s and receives the block from r-s, so every pair meets exactly once
// and each step is a permutation (no rank is the target of two senders).
func (c *call) pairwise(send, recv []byte, so, ro []int) error {
	n, r := c.t.Size(), c.t.Rank()
	copy(recv[ro[r]:ro[r+1]], send[so[r]:so[r+1]])
	for s := 1; s < n; s++ {
		to, from := mod(r+s, n), mod(r-s, n)
		err := c.stream(to, from, send[so[to]:so[to+1]], recv[ro[from]:ro[from+1]], func(dst, src []byte) { copy(dst, src) })
		if err != nil {
			return err
		}
	}
	return nil
}

// Options are the options g was built with, for groups split from it.
func (g *Group) Options() Options { return g.opts }
