package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/testmode"
)

// TestUnevenHosts runs every collective on jobs whose hosts hold
// different numbers of ranks, so that a rank alone on its host talks TCP
// only while its peers also share memory: the two kinds of link have
// different slot sizes, and a message that crosses a slot boundary must
// still be cut alike at both ends. The counts straddle the shared-memory
// slot (65520 uint32 fit in one, 65521 do not) and span several slots.
func TestUnevenHosts(t *testing.T) {
	layouts := []struct{ n, hosts int }{{3, 2}, {5, 3}}
	counts := []int{65520, 65521, 70000, 262147}
	if testing.Short() {
		counts = []int{65521, 70000}
	}
	if testmode.Quick() {
		layouts = layouts[1:] // the more uneven; the full run has both
	}
	for _, l := range layouts {
		t.Run(fmt.Sprintf("%d ranks on %d hosts", l.n, l.hosts), func(t *testing.T) {
			cs := local(t, l.n, comm.WithFakeHosts(l.hosts))
			mustEach(t, cs, func(ctx context.Context, c *comm.Communicator) error {
				for _, count := range counts {
					if err := unevenRound(ctx, c, count, l.n-1); err != nil {
						return fmt.Errorf("count %d: %w", count, err)
					}
				}
				return nil
			})
		})
	}
}

// val is what rank r puts at index i of a buffer meant for rank d.
func val(r, d, i int) uint32 { return uint32(r*1_000_003 + d*7919 + i) }

// unevenRound runs each collective once with count elements per block
// and checks every element.
func unevenRound(ctx context.Context, c *comm.Communicator, count, root int) error {
	r, n := c.Rank(), c.Size()
	check := func(what string, got []uint32, want func(i int) uint32) error {
		for i, g := range got {
			if w := want(i); g != w {
				return fmt.Errorf("%s: element %d is %d, want %d", what, i, g, w)
			}
		}
		return nil
	}
	own := make([]uint32, count)
	for i := range own {
		own[i] = val(r, 0, i)
	}

	buf := make([]uint32, count)
	if r == root {
		copy(buf, own)
	}
	if err := comm.Broadcast(ctx, c, buf, root); err != nil {
		return err
	}
	if err := check("broadcast", buf, func(i int) uint32 { return val(root, 0, i) }); err != nil {
		return err
	}

	sum := func(i int) uint32 {
		var s uint32
		for q := range n {
			s += val(q, 0, i)
		}
		return s
	}
	red := make([]uint32, count)
	if err := comm.Reduce(ctx, c, own, red, comm.Sum, root); err != nil {
		return err
	}
	if r == root {
		if err := check("reduce", red, sum); err != nil {
			return err
		}
	}
	all := append([]uint32(nil), own...)
	if err := comm.AllReduce(ctx, c, all, comm.Sum); err != nil {
		return err
	}
	if err := check("allreduce", all, sum); err != nil {
		return err
	}

	gathered := make([]uint32, n*count)
	if err := comm.Gather(ctx, c, own, gathered, root); err != nil {
		return err
	}
	if r == root {
		if err := check("gather", gathered, func(i int) uint32 { return val(i/count, 0, i%count) }); err != nil {
			return err
		}
	}
	clear(gathered)
	if err := comm.AllGather(ctx, c, own, gathered); err != nil {
		return err
	}
	if err := check("allgather", gathered, func(i int) uint32 { return val(i/count, 0, i%count) }); err != nil {
		return err
	}

	// Counts that differ by rank: rank q contributes count+q elements.
	vc := make([]int, n)
	offs := make([]int, n+1)
	for q := range n {
		vc[q] = count + q
		offs[q+1] = offs[q] + vc[q]
	}
	mine := make([]uint32, vc[r])
	for i := range mine {
		mine[i] = val(r, 0, i)
	}
	gv := make([]uint32, offs[n])
	if err := comm.AllGatherV(ctx, c, mine, gv, vc); err != nil {
		return err
	}
	for q := range n {
		if err := check(fmt.Sprintf("allgatherv block %d", q), gv[offs[q]:offs[q+1]], func(i int) uint32 { return val(q, 0, i) }); err != nil {
			return err
		}
	}

	// Block d of every rank's send is meant for rank d.
	blocks := make([]uint32, n*count)
	for d := range n {
		for i := range count {
			blocks[d*count+i] = val(r, d, i)
		}
	}
	part := make([]uint32, count)
	if err := comm.Scatter(ctx, c, blocks, part, root); err != nil {
		return err
	}
	if err := check("scatter", part, func(i int) uint32 { return val(root, r, i) }); err != nil {
		return err
	}
	clear(part)
	if err := comm.ReduceScatter(ctx, c, blocks, part, comm.Sum); err != nil {
		return err
	}
	if err := check("reducescatter", part, func(i int) uint32 {
		var s uint32
		for q := range n {
			s += val(q, r, i)
		}
		return s
	}); err != nil {
		return err
	}
	vsend := make([]uint32, offs[n])
	for d := range n {
		for i := range vc[d] {
			vsend[offs[d]+i] = val(r, d, i)
		}
	}
	vpart := make([]uint32, vc[r])
	if err := comm.ReduceScatterV(ctx, c, vsend, vpart, vc, comm.Sum); err != nil {
		return err
	}
	if err := check("reducescatterv", vpart, func(i int) uint32 {
		var s uint32
		for q := range n {
			s += val(q, r, i)
		}
		return s
	}); err != nil {
		return err
	}
	swapped := make([]uint32, n*count)
	if err := comm.AllToAll(ctx, c, blocks, swapped); err != nil {
		return err
	}
	if err := check("alltoall", swapped, func(i int) uint32 { return val(i/count, r, i%count) }); err != nil {
		return err
	}
	// All-to-all-v: rank q sends count+q elements to every rank.
	sendCounts, recvCounts := make([]int, n), make([]int, n)
	for q := range n {
		sendCounts[q], recvCounts[q] = count+r, count+q
	}
	av := make([]uint32, n*(count+r))
	for d := range n {
		for i := range count + r {
			av[d*(count+r)+i] = val(r, d, i)
		}
	}
	got := make([]uint32, offs[n])
	if err := comm.AllToAllV(ctx, c, av, sendCounts, got, recvCounts); err != nil {
		return err
	}
	for q := range n {
		if err := check(fmt.Sprintf("alltoallv from %d", q), got[offs[q]:offs[q+1]], func(i int) uint32 { return val(q, r, i) }); err != nil {
			return err
		}
	}

	// Point to point around a ring, both directions of every pair that
	// mixes a lone rank and a shared-memory one.
	next, prev := (r+1)%n, (r+n-1)%n
	in := make([]uint32, count)
	errc := make(chan error, 1)
	go func() { errc <- comm.Send(ctx, c, next, 5, own) }()
	k, err := comm.Recv(ctx, c, prev, 5, in)
	if err == nil {
		err = <-errc
	}
	if err != nil {
		return err
	}
	if k != count {
		return fmt.Errorf("recv: %d elements, want %d", k, count)
	}
	return check("send/recv", in, func(i int) uint32 { return val(prev, 0, i) })
}
