package main

import (
	"context"

	"github.com/gocoll/gocoll/comm"
)

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

func moreOps[T comm.Element]() []opSpec[T] {
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
