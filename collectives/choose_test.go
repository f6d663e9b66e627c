package collectives

import (
	"errors"
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

// TestAllReduceTable pins the selection table's corners.
func TestAllReduceTable(t *testing.T) {
	g := &Group{opts: Options{SmallAllReduce: 64 << 10}}
	cases := []struct {
		n, bytes int
		want     Algo
	}{
		{2, 8, RecursiveDoubling}, {3, 64 << 10, RecursiveDoubling}, {4, 4 << 10, RecursiveDoubling},
		{4, 8 << 10, RecursiveDoubling}, {6, 8, RecursiveDoubling}, {8, 64 << 10, RecursiveDoubling},
		{2, 64<<10 + 1, Ring}, {3, 64 << 20, Ring}, {4, 1 << 20, Ring},
		{4, 1<<20 + 4, Rabenseifner}, {5, 1 << 20, Rabenseifner}, {8, 64 << 20, Rabenseifner},
	}
	for _, tc := range cases {
		if got := g.allReduceChoice(tc.n, tc.bytes); got != tc.want || g.allReduceWhy(got, tc.n, tc.bytes) == "" {
			t.Errorf("n=%d %d bytes: %v, want %v", tc.n, tc.bytes, got, tc.want)
		}
	}
}
