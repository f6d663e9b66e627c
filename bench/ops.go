package main

import (
	"context"
	"sort"

	"github.com/gocoll/gocoll/comm"
)

// params is what a collective's entry needs to know about the run.
type params struct {
	n, rank, root int
	redop         comm.Op
	// send and recv are this row's buffer lengths in elements (recv 0: in place).
	send, recv int
}

// origin says where element i of a rank's result comes from: element index
// of rank's input, or (rank == reduced) the reduction over every rank of
// element index. rank == unchecked: the collective leaves it unspecified.
type origin struct{ rank, index int }

const (
	reduced   = -1
	unchecked = -2
)

// opSpec is one collective as collbench sees it. Adding a collective is one
// entry in opTable: how it lays out its buffers for a size, how to call it,
// where each result element comes from (for -check), and its busbw factor.
type opSpec[T comm.Element] struct {
	name string
	// bus converts algbw to busbw on n ranks, as nccl-tests' PERFORMANCE.md
	// does: the fraction of the data each rank's links must carry, so that
	// busbw is comparable across rank counts and with the hardware's peak.
	bus     func(n int) float64
	reduces bool // takes -redop; its inputs are reduceInput's, else moveInput's
	rooted  bool // takes -root
	// sizeless collectives (barrier) take no buffers: one row, size 0.
	sizeless bool
	// layout gives rank's send and recv lengths for a row of count
	// elements, where count is the nccl-tests size of the row: the larger
	// buffer's length. recv 0 means in place: the result replaces send.
	// ok false: too few elements for n ranks, and the row is skipped.
	layout func(count, n, rank int) (send, recv int, ok bool)
	// count is the count column for a row with these buffer lengths: the
	// count argument the call would have in NCCL, as nccl-tests prints it
	// (allgather: elements per rank). nil: the smaller nonzero length.
	count func(send, recv, n int) int
	// src says where element i of rank's result comes from.
	src func(p params, rank, i int) origin
	run func(ctx context.Context, c *comm.Communicator, send, recv []T, p params) error
}

func ring(n int) float64     { return 2 * float64(n-1) / float64(n) }
func oneLink(n int) float64  { return 1 }
func fraction(n int) float64 { return float64(n-1) / float64(n) }

func inPlace(count, n, rank int) (int, int, bool) { return count, 0, count > 0 }

// blocks is for collectives between one block per rank and n blocks:
// the block is count/n elements (so the row's size rounds down to n blocks).
func blocks(count, n int) (per int, ok bool) { per = count / n; return per, per > 0 }

// opTable lists every collective collbench can run, for element type T.
func opTable[T comm.Element]() []opSpec[T] {
	return append([]opSpec[T]{
		{
			name: "allreduce", bus: ring, reduces: true, layout: inPlace,
			src: func(p params, rank, i int) origin { return origin{reduced, i} },
			run: func(ctx context.Context, c *comm.Communicator, s, _ []T, p params) error {
				return comm.AllReduce(ctx, c, s, p.redop)
			},
		},
		{
			name: "broadcast", bus: oneLink, rooted: true, layout: inPlace,
			src: func(p params, rank, i int) origin { return origin{p.root, i} },
			run: func(ctx context.Context, c *comm.Communicator, s, _ []T, p params) error {
				return comm.Broadcast(ctx, c, s, p.root)
			},
		},
		{
			name: "allgather", bus: fraction,
			layout: func(count, n, _ int) (int, int, bool) { per, ok := blocks(count, n); return per, per * n, ok },
			src:    func(p params, rank, i int) origin { return origin{i / p.send, i % p.send} },
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.AllGather(ctx, c, s, r)
			},
		},
		{
			name: "reducescatter", bus: fraction, reduces: true,
			layout: func(count, n, _ int) (int, int, bool) { per, ok := blocks(count, n); return per * n, per, ok },
			src:    func(p params, rank, i int) origin { return origin{reduced, rank*p.recv + i} },
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.ReduceScatter(ctx, c, s, r, p.redop)
			},
		},
		{
			name: "barrier", bus: func(int) float64 { return 0 }, sizeless: true,
			layout: func(int, int, int) (int, int, bool) { return 0, 0, true },
			src:    func(params, int, int) origin { return origin{unchecked, 0} },
			run: func(ctx context.Context, c *comm.Communicator, _, _ []T, _ params) error {
				return c.Barrier(ctx)
			},
		},
	}, rootedAndVectorOps[T]()...)
}

// countOf is the row's count column.
func (o opSpec[T]) countOf(send, recv, n int) int {
	if o.count != nil {
		return o.count(send, recv, n)
	}
	if recv == 0 || (send != 0 && send < recv) {
		return send
	}
	return recv
}

// findOp looks a collective up by name; its type-independent fields are
// the same for every T.
func findOp(name string) (opSpec[uint8], bool) {
	return lookup[uint8](name)
}

func lookup[T comm.Element](name string) (opSpec[T], bool) {
	for _, o := range opTable[T]() {
		if o.name == name {
			return o, true
		}
	}
	return opSpec[T]{}, false
}

func opNames() []string {
	var out []string
	for _, o := range opTable[uint8]() {
		out = append(out, o.name)
	}
	sort.Strings(out)
	return out
}

// split is count elements in n blocks of base or base+1, the first
// count%n ranks one more: uneven whenever n does not divide count.
func split(count, n int) []int {
	cs := make([]int, n)
	for q := range cs {
		cs[q] = count / n
		if q < count%n {
			cs[q]++
		}
	}
	return cs
}

// splitAt finds the block holding element i of split(count, n): its rank
// and i's offset within it.
func splitAt(i, count, n int) (q, off int) {
	base, rem := count/n, count%n
	if big := rem * (base + 1); i < big {
		return i / (base + 1), i % (base + 1)
	} else {
		return rem + (i-big)/base, (i - big) % base
	}
}

func splitStart(q, count, n int) int {
	base, rem := count/n, count%n
	return q*base + min(q, rem)
}

// rootedAndVectorOps are the rooted, vector and all-to-all collectives.
func rootedAndVectorOps[T comm.Element]() []opSpec[T] {
	return []opSpec[T]{
		{
			name: "reduce", bus: oneLink, reduces: true, rooted: true,
			layout: func(count, n, _ int) (int, int, bool) { return count, count, count > 0 },
			src: func(p params, rank, i int) origin {
				if rank != p.root {
					return origin{unchecked, 0}
				}
				return origin{reduced, i}
			},
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.Reduce(ctx, c, s, r, p.redop, p.root)
			},
		},
		{
			name: "gather", bus: fraction, rooted: true,
			layout: func(count, n, _ int) (int, int, bool) { per, ok := blocks(count, n); return per, per * n, ok },
			src: func(p params, rank, i int) origin {
				if rank != p.root {
					return origin{unchecked, 0}
				}
				return origin{i / p.send, i % p.send}
			},
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.Gather(ctx, c, s, r, p.root)
			},
		},
		{
			name: "scatter", bus: fraction, rooted: true,
			layout: func(count, n, _ int) (int, int, bool) { per, ok := blocks(count, n); return per * n, per, ok },
			src:    func(p params, rank, i int) origin { return origin{p.root, rank*p.recv + i} },
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.Scatter(ctx, c, s, r, p.root)
			},
		},
		{
			name: "alltoall", bus: fraction,
			count:  func(send, _, n int) int { return send / n },
			layout: func(count, n, _ int) (int, int, bool) { per, ok := blocks(count, n); return per * n, per * n, ok },
			src: func(p params, rank, i int) origin {
				per := p.send / p.n
				return origin{i / per, rank*per + i%per}
			},
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.AllToAll(ctx, c, s, r)
			},
		},
		{
			// Each rank sends to the next and receives from the previous, as
			// nccl-tests' sendrecv does.
			name: "sendrecv", bus: oneLink,
			layout: func(count, n, _ int) (int, int, bool) { return count, count, count > 0 },
			src:    func(p params, rank, i int) origin { return origin{(rank + p.n - 1) % p.n, i} },
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				_, err := comm.SendRecv(ctx, c, s, (p.rank+1)%p.n, 0, r, (p.rank+p.n-1)%p.n, 0)
				return err
			},
		},
		{
			name: "allgatherv", bus: fraction,
			count: func(_, recv, n int) int { return recv / n },
			layout: func(count, n, rank int) (int, int, bool) {
				return split(count, n)[rank], count, count >= n
			},
			src: func(p params, rank, i int) origin { q, off := splitAt(i, p.recv, p.n); return origin{q, off} },
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.AllGatherV(ctx, c, s, r, split(p.recv, p.n))
			},
		},
		{
			name: "reducescatterv", bus: fraction, reduces: true,
			count: func(send, _, n int) int { return send / n },
			layout: func(count, n, rank int) (int, int, bool) {
				return count, split(count, n)[rank], count >= n
			},
			src: func(p params, rank, i int) origin { return origin{reduced, splitStart(rank, p.send, p.n) + i} },
			run: func(ctx context.Context, c *comm.Communicator, s, r []T, p params) error {
				return comm.ReduceScatterV(ctx, c, s, r, split(p.send, p.n), p.redop)
			},
		},
	}
}
