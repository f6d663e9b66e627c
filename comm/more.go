package comm

import (
	"context"
	"fmt"
	"sort"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
)

// Reduce combines send element-wise across ranks with op into recv on the
// root; recv is ignored on the other ranks (nil will do). On the root
// len(recv) must be len(send), and recv may be send itself (in place);
// any other overlap is refused. Every rank passes the same length, op and
// root.
func Reduce[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op, root int) error {
	return c.do(ctx, reduceJob(c, send, recv, op, root))
}

// ReduceAsync is Reduce, issued now and finished in the background.
func ReduceAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op, root int) *Request {
	return c.start(ctx, reduceJob(c, send, recv, op, root))
}

func reduceJob[T Element](c *Communicator, send, recv []T, op Op, root int) job {
	const what = "reduce"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkOp[T](what, op); err != nil {
		return job{err: err}
	}
	if err := checkRoot(c, what, root); err != nil {
		return job{err: err}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if c.Rank() == root {
		if len(recv) != len(send) {
			return job{err: fmt.Errorf("comm: reduce: len(recv) = %d at the root, want len(send) = %d: %w", len(recv), len(send), ErrInvalid)}
		}
		if overlap(s, r) && !same(s, r) {
			return job{err: fmt.Errorf("comm: reduce: send and recv overlap without being the same slice: %w", ErrInvalid)}
		}
	} else {
		r = nil
	}
	return job{what: what, f: func(ctx context.Context) error {
		return c.g.Reduce(ctx, s, r, dtypeOf[T](), reduce.Op(op), root)
	}}
}

func checkRoot(c *Communicator, what string, root int) error {
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("comm: %s: root %d out of range [0, %d): %w", what, root, c.Size(), ErrInvalid)
	}
	return nil
}

// Gather concatenates every rank's send, in rank order, into recv on the
// root, where len(recv) must be Size()*len(send); recv is ignored on the
// other ranks. On the root, send may be recv's own block (in place); any
// other overlap is refused.
func Gather[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.do(ctx, gatherJob(c, send, recv, root))
}

// GatherAsync is Gather, issued now and finished in the background.
func GatherAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) *Request {
	return c.start(ctx, gatherJob(c, send, recv, root))
}

func gatherJob[T Element](c *Communicator, send, recv []T, root int) job {
	const what = "gather"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkRoot(c, what, root); err != nil {
		return job{err: err}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if c.Rank() == root {
		if len(recv) != c.Size()*len(send) {
			return job{err: fmt.Errorf("comm: gather: len(recv) = %d at the root, want Size() x len(send) = %d x %d: %w", len(recv), c.Size(), len(send), ErrInvalid)}
		}
		if overlap(s, r) && !same(s, r[root*len(s):(root+1)*len(s)]) {
			return job{err: fmt.Errorf("comm: gather: send overlaps recv other than at the root's block: %w", ErrInvalid)}
		}
	} else {
		r = nil
	}
	return job{what: what, f: func(ctx context.Context) error { return c.g.Gather(ctx, s, r, dtypeOf[T](), root) }}
}

// Scatter hands block q of the root's send (Size() blocks of len(recv)
// elements) to rank q's recv; send is ignored on the other ranks. On the
// root, recv may be send's own block (in place); any other overlap is
// refused.
func Scatter[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.do(ctx, scatterJob(c, send, recv, root))
}

// ScatterAsync is Scatter, issued now and finished in the background.
func ScatterAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, root int) *Request {
	return c.start(ctx, scatterJob(c, send, recv, root))
}

func scatterJob[T Element](c *Communicator, send, recv []T, root int) job {
	const what = "scatter"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkRoot(c, what, root); err != nil {
		return job{err: err}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if c.Rank() == root {
		if len(send) != c.Size()*len(recv) {
			return job{err: fmt.Errorf("comm: scatter: len(send) = %d at the root, want Size() x len(recv) = %d x %d: %w", len(send), c.Size(), len(recv), ErrInvalid)}
		}
		if overlap(s, r) && !same(r, s[root*len(r):(root+1)*len(r)]) {
			return job{err: fmt.Errorf("comm: scatter: recv overlaps send other than at the root's block: %w", ErrInvalid)}
		}
	} else {
		s = nil
	}
	return job{what: what, f: func(ctx context.Context) error { return c.g.Scatter(ctx, s, r, dtypeOf[T](), root) }}
}

// AllGatherV is AllGather with a count per rank: rank q contributes
// counts[q] elements, len(send) is counts[Rank()] and len(recv) the sum
// of counts, blocks in rank order. Every rank passes the same counts. send
// may be recv's own block; any other overlap is refused.
func AllGatherV[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int) error {
	return c.do(ctx, allGatherVJob(c, send, recv, counts))
}

// AllGatherVAsync is AllGatherV, issued now and finished in the background.
func AllGatherVAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int) *Request {
	return c.start(ctx, allGatherVJob(c, send, recv, counts))
}

func allGatherVJob[T Element](c *Communicator, send, recv []T, counts []int) job {
	const what = "allgatherv"
	if c == nil {
		return job{err: errNil(what)}
	}
	offs, err := countOffsets(c, what, "counts", counts)
	if err != nil {
		return job{err: err}
	}
	r := c.Rank()
	if len(send) != counts[r] || len(recv) != offs[c.Size()] {
		return job{err: fmt.Errorf("comm: allgatherv: len(send) = %d and len(recv) = %d, want counts[%d] = %d and the sum of counts, %d: %w",
			len(send), len(recv), r, counts[r], offs[c.Size()], ErrInvalid)}
	}
	s, rb := bytesOf(send), bytesOf(recv)
	es := dtypeOf[T]().Size()
	if overlap(s, rb) && !same(s, rb[offs[r]*es:offs[r+1]*es]) {
		return job{err: fmt.Errorf("comm: allgatherv: send overlaps recv other than at this rank's block: %w", ErrInvalid)}
	}
	counts = append([]int(nil), counts...) // the caller may reuse its slice before an async call runs
	return job{what: what, f: func(ctx context.Context) error { return c.g.AllGatherV(ctx, s, rb, counts, dtypeOf[T]()) }}
}

// countOffsets checks a count list (one non-negative count per rank) and
// returns the element offsets of the blocks, Size()+1 of them.
func countOffsets(c *Communicator, what, name string, counts []int) ([]int, error) {
	n := c.Size()
	if len(counts) != n {
		return nil, fmt.Errorf("comm: %s: len(%s) = %d, want one per rank, %d: %w", what, name, len(counts), n, ErrInvalid)
	}
	offs := make([]int, n+1)
	for q, k := range counts {
		if k < 0 {
			return nil, fmt.Errorf("comm: %s: %s[%d] = %d is negative: %w", what, name, q, k, ErrInvalid)
		}
		offs[q+1] = offs[q] + k
	}
	return offs, nil
}

// ReduceScatterV is ReduceScatter with a count per rank: block q of the
// result, counts[q] elements, goes to rank q; len(send) is the sum of
// counts and len(recv) counts[Rank()]. Every rank passes the same counts.
// recv may be send's own block; any other overlap is refused.
func ReduceScatterV[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int, op Op) error {
	return c.do(ctx, reduceScatterVJob(c, send, recv, counts, op))
}

// ReduceScatterVAsync is ReduceScatterV, issued now and finished in the
// background.
func ReduceScatterVAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, counts []int, op Op) *Request {
	return c.start(ctx, reduceScatterVJob(c, send, recv, counts, op))
}

func reduceScatterVJob[T Element](c *Communicator, send, recv []T, counts []int, op Op) job {
	const what = "reducescatterv"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkOp[T](what, op); err != nil {
		return job{err: err}
	}
	offs, err := countOffsets(c, what, "counts", counts)
	if err != nil {
		return job{err: err}
	}
	r := c.Rank()
	if len(send) != offs[c.Size()] || len(recv) != counts[r] {
		return job{err: fmt.Errorf("comm: reducescatterv: len(send) = %d and len(recv) = %d, want the sum of counts, %d, and counts[%d] = %d: %w",
			len(send), len(recv), offs[c.Size()], r, counts[r], ErrInvalid)}
	}
	s, rb := bytesOf(send), bytesOf(recv)
	es := dtypeOf[T]().Size()
	if overlap(s, rb) && !same(rb, s[offs[r]*es:offs[r+1]*es]) {
		return job{err: fmt.Errorf("comm: reducescatterv: recv overlaps send other than at this rank's block: %w", ErrInvalid)}
	}
	counts = append([]int(nil), counts...)
	return job{what: what, f: func(ctx context.Context) error {
		return c.g.ReduceScatterV(ctx, s, rb, counts, dtypeOf[T](), reduce.Op(op))
	}}
}

// AllToAll sends block q of send to rank q, which puts it in block Rank()
// of its recv: send and recv are Size() blocks of the same length, and
// must not overlap.
func AllToAll[T Element](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.do(ctx, allToAllJob(c, send, recv))
}

// AllToAllAsync is AllToAll, issued now and finished in the background.
func AllToAllAsync[T Element](ctx context.Context, c *Communicator, send, recv []T) *Request {
	return c.start(ctx, allToAllJob(c, send, recv))
}

func allToAllJob[T Element](c *Communicator, send, recv []T) job {
	const what = "alltoall"
	if c == nil {
		return job{err: errNil(what)}
	}
	if len(send)%c.Size() != 0 || len(recv) != len(send) {
		return job{err: fmt.Errorf("comm: alltoall: len(send) = %d and len(recv) = %d, want equal and a multiple of Size() = %d: %w", len(send), len(recv), c.Size(), ErrInvalid)}
	}
	s, r := bytesOf(send), bytesOf(recv)
	if overlap(s, r) {
		return job{err: fmt.Errorf("comm: alltoall: send and recv overlap: %w", ErrInvalid)}
	}
	return job{what: what, f: func(ctx context.Context) error { return c.g.AllToAll(ctx, s, r, dtypeOf[T]()) }}
}

// AllToAllV sends sendCounts[q] elements to rank q and receives
// recvCounts[q] from it; blocks lie in rank order in send and recv, whose
// lengths are the sums of the counts. What rank p sends to q must be what
// q expects from p. send and recv must not overlap.
func AllToAllV[T Element](ctx context.Context, c *Communicator, send []T, sendCounts []int, recv []T, recvCounts []int) error {
	return c.do(ctx, allToAllVJob(c, send, sendCounts, recv, recvCounts))
}

// AllToAllVAsync is AllToAllV, issued now and finished in the background.
func AllToAllVAsync[T Element](ctx context.Context, c *Communicator, send []T, sendCounts []int, recv []T, recvCounts []int) *Request {
	return c.start(ctx, allToAllVJob(c, send, sendCounts, recv, recvCounts))
}

func allToAllVJob[T Element](c *Communicator, send []T, sendCounts []int, recv []T, recvCounts []int) job {
	const what = "alltoallv"
	if c == nil {
		return job{err: errNil(what)}
	}
	so, err := countOffsets(c, what, "sendCounts", sendCounts)
	if err != nil {
		return job{err: err}
	}
	ro, err := countOffsets(c, what, "recvCounts", recvCounts)
	if err != nil {
		return job{err: err}
	}
	n, r := c.Size(), c.Rank()
	if len(send) != so[n] || len(recv) != ro[n] {
		return job{err: fmt.Errorf("comm: alltoallv: len(send) = %d and len(recv) = %d, want the sums of sendCounts and recvCounts, %d and %d: %w",
			len(send), len(recv), so[n], ro[n], ErrInvalid)}
	}
	if sendCounts[r] != recvCounts[r] {
		return job{err: fmt.Errorf("comm: alltoallv: sendCounts[%d] = %d but recvCounts[%d] = %d (this rank's block to itself): %w", r, sendCounts[r], r, recvCounts[r], ErrInvalid)}
	}
	s, rb := bytesOf(send), bytesOf(recv)
	if overlap(s, rb) {
		return job{err: fmt.Errorf("comm: alltoallv: send and recv overlap: %w", ErrInvalid)}
	}
	sc, rc := append([]int(nil), sendCounts...), append([]int(nil), recvCounts...)
	return job{what: what, f: func(ctx context.Context) error { return c.g.AllToAllV(ctx, s, sc, rb, rc, dtypeOf[T]()) }}
}

// BarrierAsync is Barrier, issued now and finished in the background.
func (c *Communicator) BarrierAsync(ctx context.Context) *Request {
	if c == nil {
		return c.start(ctx, job{err: errNil("barrier")})
	}
	return c.start(ctx, job{what: "barrier", f: func(ctx context.Context) error { return c.g.Barrier(ctx) }})
}

// AllReduceMany allreduces every buffer of bufs with op as one collective:
// the buffers are packed into one, reduced together, and unpacked, so k
// small allreduces cost one round of messages instead of k (gradient
// bucketing). Every rank passes the same number of buffers with the same
// lengths. The buffers must not overlap one another.
func AllReduceMany[T Element](ctx context.Context, c *Communicator, bufs [][]T, op Op) error {
	return c.do(ctx, allReduceManyJob(c, bufs, op))
}

// AllReduceManyAsync is AllReduceMany, issued now and finished in the
// background.
func AllReduceManyAsync[T Element](ctx context.Context, c *Communicator, bufs [][]T, op Op) *Request {
	return c.start(ctx, allReduceManyJob(c, bufs, op))
}

func allReduceManyJob[T Element](c *Communicator, bufs [][]T, op Op) job {
	const what = "allreducemany"
	if c == nil {
		return job{err: errNil(what)}
	}
	if err := checkOp[T](what, op); err != nil {
		return job{err: err}
	}
	type span struct{ lo, hi uintptr }
	spans := make([]span, 0, len(bufs))
	total := 0
	for _, b := range bufs {
		total += len(b)
		if len(b) > 0 {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			spans = append(spans, span{lo, lo + uintptr(len(b))*unsafe.Sizeof(b[0])})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return job{err: fmt.Errorf("comm: allreducemany: two of the %d buffers overlap: %w", len(bufs), ErrInvalid)}
		}
	}
	bufs = append([][]T(nil), bufs...)
	return job{what: what, f: func(ctx context.Context) error {
		packed := make([]T, 0, total)
		for _, b := range bufs {
			packed = append(packed, b...)
		}
		if err := c.g.AllReduce(ctx, bytesOf(packed), dtypeOf[T](), reduce.Op(op)); err != nil {
			return err
		}
		off := 0
		for _, b := range bufs {
			off += copy(b, packed[off:])
		}
		return nil
	}}
}
