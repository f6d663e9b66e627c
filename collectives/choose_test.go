package collectives

import (
	"errors"
	"strings"
	"testing"
)

func TestParseNewAlgos(t *testing.T) {
	m, err := ParseAlgos("allreduce=rabenseifner,reduce=binomial")
	if err != nil || m[AllReduce] != Rabenseifner || m[Reduce] != Binomial {
		t.Fatalf("ParseAlgos = %v, %v", m, err)
	}
	m, err = ParseAlgos("tree")
	if err != nil || len(m) != 1 || m[AllReduce] != Tree {
		t.Fatalf("tree applies to %v, %v; want allreduce only", m, err)
	}
	m, err = ParseAlgos("linear")
	if err != nil || len(m) != 2 || m[Gather] != Linear || m[Scatter] != Linear {
		t.Fatalf("linear applies to %v, %v; want gather and scatter", m, err)
	}
	if _, err := ParseAlgos("broadcast=pairwise"); !errors.Is(err, ErrBadAlgo) {
		t.Fatalf("broadcast=pairwise: %v, want ErrBadAlgo", err)
	}
	if _, err := ParseAlgos("alltoallv=pairwise"); err != nil {
		t.Fatalf("alltoallv=pairwise: %v", err)
	}
}

// TestAllReduceTable pins the selection table's corners, without and
// with a floor on the ring's step (Options.RingChunk, as comm sets it
// for TCP).
func TestAllReduceTable(t *testing.T) {
	cases := []struct {
		ringChunk, n, bytes int
		want                Algo
	}{
		{0, 2, 8, RecursiveDoubling}, {0, 3, 64 << 10, RecursiveDoubling}, {0, 4, 4 << 10, RecursiveDoubling},
		{0, 4, 8 << 10, RecursiveDoubling}, {0, 6, 8, RecursiveDoubling}, {0, 8, 64 << 10, RecursiveDoubling},
		{0, 2, 64<<10 + 1, Ring}, {0, 3, 64 << 20, Ring}, {0, 4, 1 << 20, Ring},
		{0, 4, 1<<20 + 4, Rabenseifner}, {0, 5, 1 << 20, Rabenseifner}, {0, 8, 64 << 20, Rabenseifner},
		// With the floor: Rabenseifner until a ring step carries it.
		{256 << 10, 4, 64 << 10, RecursiveDoubling},
		{256 << 10, 4, 64<<10 + 4, Rabenseifner}, {256 << 10, 4, 1<<20 - 4, Rabenseifner},
		{256 << 10, 4, 1 << 20, Ring}, {256 << 10, 4, 1<<20 + 4, Rabenseifner},
		{256 << 10, 3, 512 << 10, Rabenseifner}, {256 << 10, 3, 768 << 10, Ring}, {256 << 10, 3, 64 << 20, Ring},
		// Two ranks: the ring and Rabenseifner take the same steps.
		{256 << 10, 2, 128 << 10, Ring},
		{256 << 10, 8, 64 << 20, Rabenseifner},
	}
	for _, tc := range cases {
		g := &Group{opts: Options{SmallAllReduce: 64 << 10, RingChunk: tc.ringChunk}}
		got := g.allReduceChoice(tc.n, tc.bytes)
		if why := g.allReduceWhy(got, tc.n, tc.bytes); got != tc.want || why == "" {
			t.Errorf("ring chunk %d, n=%d %d bytes: %v (%s), want %v", tc.ringChunk, tc.n, tc.bytes, got, why, tc.want)
		}
	}
	// comm's TCP options: recursive doubling ends at 16 KiB on powers
	// of two from 4, and only there.
	tcp := &Group{opts: Options{SmallAllReduce: 64 << 10, SmallAllReducePow2: 16 << 10, RingChunk: 256 << 10}}
	for _, tc := range []struct {
		n, bytes int
		want     Algo
	}{
		{4, 16 << 10, RecursiveDoubling}, {4, 16<<10 + 4, Rabenseifner}, {8, 32 << 10, Rabenseifner},
		{16, 8 << 10, RecursiveDoubling}, {16, 64 << 10, Rabenseifner},
		{2, 32 << 10, RecursiveDoubling}, {3, 64 << 10, RecursiveDoubling}, {6, 64 << 10, RecursiveDoubling},
		{4, 1 << 20, Ring}, {2, 64<<10 + 4, Ring},
	} {
		got := tcp.allReduceChoice(tc.n, tc.bytes)
		if why := tcp.allReduceWhy(got, tc.n, tc.bytes); got != tc.want || !strings.Contains(why, "bytes") {
			t.Errorf("tcp, n=%d %d bytes: %v (%s), want %v", tc.n, tc.bytes, got, why, tc.want)
		}
	}
}

// TestWideChoice pins where a wide (float32-partial) 16-bit reduction
// runs the pairwise reduce-scatter, and that GOCOLL_ALGO still wins.
func TestWideChoice(t *testing.T) {
	cases := []struct {
		kind     Kind
		n, bytes int
		forced   Algo
		want     Algo
	}{
		{AllReduce, 2, 1 << 20, Auto, Ring},
		{AllReduce, 3, 8, Auto, RecursiveDoubling},
		{AllReduce, 3, 16 << 10, Auto, RecursiveDoubling},
		{AllReduce, 3, 32 << 10, Auto, Pairwise},
		{AllReduce, 4, 64 << 10, Auto, Pairwise},
		{AllReduce, 6, 64 << 10, Auto, RecursiveDoubling},
		{AllReduce, 3, 64 << 20, Auto, Pairwise},
		{AllReduce, 8, 64 << 20, Auto, Pairwise},
		{AllReduce, 9, 64 << 20, Auto, Rabenseifner},
		{AllReduce, 4, 64 << 20, Ring, Ring},
		{AllReduce, 4, 8, Pairwise, Pairwise},
		{ReduceScatter, 3, 8, Auto, Pairwise},
		{ReduceScatterV, 4, 1 << 20, Auto, Pairwise},
		{ReduceScatterV, 2, 1 << 20, Auto, Ring},
		{ReduceScatter, 4, 1 << 20, Ring, Ring},
	}
	for _, tc := range cases {
		g := &Group{n: tc.n, opts: Options{SmallAllReduce: 64 << 10, SmallBroadcast: 64 << 10}}
		g.forced[tc.kind] = tc.forced
		if got := g.chooseWide(tc.kind, tc.bytes); got != tc.want || g.why(tc.kind, got, tc.bytes) == "" {
			t.Errorf("%v n=%d %d bytes forced %v: %v, want %v", tc.kind, tc.n, tc.bytes, tc.forced, got, tc.want)
		}
	}
	// comm's TCP options leave the wide table as it was: recursive
	// doubling below SmallAllReduce/2 on 4 and 8 ranks, pairwise above
	// on 4.
	for _, tc := range []struct {
		n, bytes int
		want     Algo
	}{
		{4, 24 << 10, RecursiveDoubling}, {4, 32 << 10, Pairwise}, {8, 32 << 10, RecursiveDoubling},
		{8, 64 << 10, RecursiveDoubling}, {8, 1 << 20, Pairwise}, {4, 1 << 20, Pairwise},
	} {
		g := &Group{n: tc.n, opts: Options{SmallAllReduce: 64 << 10, SmallAllReducePow2: 16 << 10, RingChunk: 256 << 10}}
		if got := g.chooseWide(AllReduce, tc.bytes); got != tc.want {
			t.Errorf("tcp options, wide allreduce n=%d %d bytes: %v, want %v", tc.n, tc.bytes, got, tc.want)
		}
	}
}
