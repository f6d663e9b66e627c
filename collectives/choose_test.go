package collectives

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/reduce"
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
		g := &Group{n: tc.n, opts: Options{SmallAllReduce: 64 << 10, RingChunk: tc.ringChunk}}
		got, why := g.Choice(AllReduce, tc.bytes, reduce.Float32, reduce.Sum)
		if got != tc.want || why == "" {
			t.Errorf("ring chunk %d, n=%d %d bytes: %v (%s), want %v", tc.ringChunk, tc.n, tc.bytes, got, why, tc.want)
		}
	}
	// comm's TCP options: recursive doubling ends at 16 KiB on powers
	// of two from 4, and only there.
	for _, tc := range []struct {
		n, bytes int
		want     Algo
	}{
		{4, 16 << 10, RecursiveDoubling}, {4, 16<<10 + 4, Rabenseifner}, {8, 32 << 10, Rabenseifner},
		{16, 8 << 10, RecursiveDoubling}, {16, 64 << 10, Rabenseifner},
		{2, 32 << 10, RecursiveDoubling}, {3, 64 << 10, RecursiveDoubling}, {6, 64 << 10, RecursiveDoubling},
		{4, 1 << 20, Ring}, {2, 64<<10 + 4, Ring},
	} {
		tcp := &Group{n: tc.n, opts: Options{SmallAllReduce: 64 << 10, SmallAllReducePow2: 16 << 10, RingChunk: 256 << 10}}
		got, why := tcp.Choice(AllReduce, tc.bytes, reduce.Float32, reduce.Sum)
		if got != tc.want || !strings.Contains(why, "bytes") {
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
		if got, why := g.Choice(tc.kind, tc.bytes, reduce.Float16, reduce.Sum); got != tc.want || why == "" {
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
		if got, _ := g.Choice(AllReduce, tc.bytes, reduce.BFloat16, reduce.Sum); got != tc.want {
			t.Errorf("tcp options, wide allreduce n=%d %d bytes: %v, want %v", tc.n, tc.bytes, got, tc.want)
		}
	}
}

// TestChoiceWhy: the reason logged is the rule that chose, so it states
// the figures that decided (the 4-rank 24 KiB allreduce over costly
// steps once said "24576 bytes <= 16384"), and a second copy of the
// table cannot drift from the first: every reason a row gives must hold
// for the call it was given for.
func TestChoiceWhy(t *testing.T) {
	tcp := Options{SmallAllReduce: 64 << 10, SmallAllReducePow2: 16 << 10, RingChunk: 256 << 10, SmallBroadcast: 64 << 10}
	cases := []struct {
		opts     Options
		kind     Kind
		n, bytes int
		dt       reduce.DType
		want     Algo
		why      string
	}{
		{tcp, AllReduce, 4, 24 << 10, reduce.Float64, Rabenseifner, "a ring step would carry 6144 bytes < 262144"},
		{tcp, AllReduce, 8, 32 << 10, reduce.Float64, Rabenseifner, "a ring step would carry 4096 bytes < 262144"},
		{tcp, AllReduce, 4, 16 << 10, reduce.Float64, RecursiveDoubling, "16384 bytes <= 16384 on 4 ranks"},
		{tcp, AllReduce, 4, 24 << 10, reduce.Float16, RecursiveDoubling, "16-bit in float32, 24576 bytes on 4 ranks, below"},
		{tcp, AllReduce, 4, 32 << 10, reduce.Float16, Pairwise, "pairwise reduce-scatter"},
		{tcp, AllReduce, 4, 1 << 20, reduce.Float32, Ring, "few ranks"},
		{tcp, AllReduce, 16, 64 << 20, reduce.Float32, Rabenseifner, "many ranks"},
		{tcp, AllReduce, 1, 1 << 20, reduce.Float32, Local, "one rank"},
		{tcp, ReduceScatter, 4, 1 << 20, reduce.BFloat16, Pairwise, "pairwise"},
		{tcp, ReduceScatter, 4, 1 << 20, reduce.Float32, Ring, "default"},
		{tcp, Broadcast, 4, 1 << 20, reduce.Uint8, Chain, "1048576 bytes > 65536"},
		{tcp, Broadcast, 4, 8, reduce.Uint8, Binomial, "latency-bound"},
		{tcp, Barrier, 4, 0, reduce.Uint8, Dissemination, "default"},
		{Options{SmallAllReduce: 64 << 10, Algos: map[Kind]Algo{AllReduce: Tree}}, AllReduce, 4, 8, reduce.Float32, Tree, "GOCOLL_ALGO"},
		{Options{SmallAllReduce: 64 << 10, Hosts: []int{0, 0, 1, 1}}, AllReduce, 4, 8, reduce.Float32, Hier, "2 hosts"},
		{Options{SmallAllReduce: 64 << 10, HierSegment: 1 << 20, Hosts: []int{0, 0, 1, 1}}, AllReduce, 4, 2<<20 - 4, reduce.Float32, Hier, "2 hosts"},
		{Options{SmallAllReduce: 64 << 10, HierSegment: 1 << 20, Hosts: []int{0, 0, 1, 1}}, AllReduce, 4, 2 << 20, reduce.Float32, HierPipe, "2097152 bytes >= 2 stages of 1048576"},
		{Options{SmallAllReduce: 64 << 10, HierSegment: 1 << 20, Hosts: []int{0, 0, 0, 1}}, AllReduce, 4, 64 << 20, reduce.BFloat16, HierPipe, "up to 3 per host"},
		{Options{SmallAllReduce: 64 << 10, HierSegment: 1 << 20, Hosts: []int{0, 0, 1, 1}, Algos: map[Kind]Algo{AllReduce: Hier}}, AllReduce, 4, 64 << 20, reduce.Float32, Hier, "GOCOLL_ALGO"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v/%d/%d/%v", tc.kind, tc.n, tc.bytes, tc.dt), func(t *testing.T) {
			g := &Group{n: tc.n, opts: tc.opts}
			g.hier = len(tc.opts.Hosts) > 0
			for k, a := range tc.opts.Algos {
				g.forced[k] = a
			}
			got, why := g.Choice(tc.kind, tc.bytes, tc.dt, reduce.Sum)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("%v, %q; want %v, a reason containing %q", got, why, tc.want, tc.why)
			}
		})
	}
}

// TestChoiceMapped: an allreduce of memory every rank maps reads it in
// place from Options.SingleCopyMin bytes, and below takes the row a
// buffer of the heap would, for the same reason; a 16-bit sum with
// float32 partials too (the single copy has the wide ring's bits), on 2
// ranks (Avg), 3 to 8 (where its own rows would pick the pairwise
// reduce-scatter) and more.
func TestChoiceMapped(t *testing.T) {
	shm := Options{SmallAllReduce: 64 << 10, SmallBroadcast: 64 << 10, SingleCopyMin: 256 << 10}
	cases := []struct {
		n, bytes int
		wide     bool
		want     Algo
		why      string
	}{
		{2, 256 << 10, false, SingleCopy, "262144 bytes >= 262144 in buffers every rank reads"},
		{4, 64 << 20, false, SingleCopy, "no copy through the rings"},
		{2, 256<<10 - 4, false, Ring, "few ranks"},
		{4, 8 << 10, false, RecursiveDoubling, "8192 bytes <= 65536 on 4 ranks"},
		{4, 1 << 20, true, SingleCopy, "no copy through the rings; 16-bit summed in float32, with the wide ring's bits"},
		{2, 1 << 20, true, SingleCopy, "with the wide ring's bits"},
		{9, 1 << 20, true, SingleCopy, "with the wide ring's bits"},
		{4, 256<<10 - 2, true, Pairwise, "16-bit in float32, 262142 bytes on 4 ranks: the pairwise reduce-scatter sends every block once, in 16 bits; not the single copy: 262142 bytes < its floor 262144"},
		{4, 8 << 10, true, RecursiveDoubling, "16-bit in float32, 8192 bytes on 4 ranks, below the pairwise reduce-scatter's floor: latency-bound; not the single copy: 8192 bytes < its floor"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d/%d/%v", tc.n, tc.bytes, tc.wide), func(t *testing.T) {
			g := &Group{n: tc.n, opts: shm}
			s := shape{kind: AllReduce, n: tc.n, bytes: tc.bytes, wide: tc.wide, mapped: true}
			got, row := g.pick(s)
			if why := rules[row].why(g, s); got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("%v, %q; want %v, a reason containing %q", got, why, tc.want, tc.why)
			}
			s.mapped = false
			if heap, _ := g.pick(s); tc.want != SingleCopy && heap != got {
				t.Errorf("%v, but %v for a buffer of the heap", got, heap)
			}
		})
	}
}

// TestChoiceNotSingle: every condition of the single copy is a row of
// the table, so the
// reason logged for a buffer every rank maps says why it was not read in
// place: one rank, an exact sum, GOCOLL_ALGO, several hosts, a size
// below the floor (16-bit data with float32 partials is no reason: see
// TestChoiceMapped). The algorithm is the
// one a buffer of the heap gets.
func TestChoiceNotSingle(t *testing.T) {
	shm := Options{SmallAllReduce: 64 << 10, SingleCopyMin: 1 << 20}
	forced := shm
	forced.Algos = map[Kind]Algo{AllReduce: Rabenseifner}
	hosts := shm
	hosts.Hosts = []int{0, 0, 1, 1}
	cases := []struct {
		name        string
		opts        Options
		n, bytes    int
		wide, exact bool
		want        Algo
		why         string
	}{
		{"one rank", shm, 1, 4 << 20, false, false, Local, "one rank"},
		{"exact", shm, 4, 4 << 20, false, true, Pairwise, "exactsum"},
		{"forced", forced, 4, 4 << 20, false, false, Rabenseifner, "forced (GOCOLL_ALGO)"},
		{"hosts", hosts, 4, 4 << 20, false, false, Hier, "2 hosts"},
		{"wide below floor", shm, 4, 1<<20 - 2, true, false, Pairwise, "16-bit in float32, 1048574 bytes on 4 ranks: the pairwise reduce-scatter sends every block once, in 16 bits; not the single copy: 1048574 bytes < its floor 1048576"},
		{"wide 9 ranks below floor", shm, 9, 1<<20 - 2, true, false, Rabenseifner, "many ranks; not the single copy: 1048574 bytes < its floor"},
		{"wide forced", forced, 4, 4 << 20, true, false, Rabenseifner, "forced (GOCOLL_ALGO)"},
		{"small", shm, 4, 8 << 10, false, false, RecursiveDoubling, "not the single copy: 8192 bytes < its floor 1048576"},
		{"below floor", shm, 2, 1<<20 - 8, false, false, Ring, "few ranks; not the single copy: 1048568 bytes < its floor 1048576"},
		{"floor", shm, 2, 1 << 20, false, false, SingleCopy, "1048576 bytes >= 1048576"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &Group{n: tc.n, opts: tc.opts, hier: len(tc.opts.Hosts) > 0}
			for k, a := range tc.opts.Algos {
				g.forced[k] = a
			}
			s := shape{kind: AllReduce, n: tc.n, bytes: tc.bytes, wide: tc.wide, exact: tc.exact, mapped: true}
			got, row := g.pick(s)
			if why := rules[row].why(g, s); got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("%v, %q; want %v, a reason containing %q", got, why, tc.want, tc.why)
			}
			s.mapped = false
			heap, row := g.pick(s)
			if why := rules[row].why(g, s); tc.want != SingleCopy && heap != got || strings.Contains(why, "single copy") {
				t.Errorf("a buffer of the heap: %v, %q; want %v, without a word of the single copy", heap, why, got)
			}
		})
	}
}

// TestChoiceRead: buffers the ranks read through a PeerReader take the
// single copy on up to Options.SingleCopyReadRanks ranks; beyond, the
// usual rows, whose reason says why.
func TestChoiceRead(t *testing.T) {
	g := &Group{opts: Options{SmallAllReduce: 64 << 10, SingleCopyMin: 1 << 20, SingleCopyReadRanks: 2}}
	cases := []struct {
		n    int
		want Algo
		why  string
	}{
		{2, SingleCopy, "no copy through the rings"},
		{3, Ring, "few ranks; not the single copy: it would read the peers' buffers with process_vm_readv, slower than the rings on more than 2 ranks"},
		{4, Rabenseifner, "process_vm_readv"},
	}
	for _, tc := range cases {
		g.n = tc.n
		s := shape{kind: AllReduce, n: tc.n, bytes: 4 << 20, mapped: true, read: true}
		got, row := g.pick(s)
		if why := rules[row].why(g, s); got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%d ranks: %v, %q; want %v, a reason containing %q", tc.n, got, why, tc.want, tc.why)
		}
		if s.read = false; tc.n > 2 {
			if got, _ := g.pick(s); got != SingleCopy {
				t.Errorf("%d ranks, mapped: %v, want the single copy", tc.n, got)
			}
		}
	}
}

// TestChoiceLogMapped: GOCOLL_DEBUG=info logs the reason of a row once for
// buffers every rank maps and once for others, as they differ.
func TestChoiceLogMapped(t *testing.T) {
	var out strings.Builder
	g := &Group{n: 2, opts: Options{SmallAllReduce: 64 << 10, SingleCopyMin: 1 << 20, Logger: slog.New(slog.NewTextHandler(&out, nil))},
		logged: make(map[decision]bool), logInfo: true}
	g.decide(shape{kind: AllReduce, n: 2, bytes: 512 << 10})
	g.decide(shape{kind: AllReduce, n: 2, bytes: 512 << 10, mapped: true})
	g.decide(shape{kind: AllReduce, n: 2, bytes: 256 << 10, mapped: true})
	g.decide(shape{kind: AllReduce, n: 2, bytes: 2 << 20, mapped: true})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"few ranks\"", "524288 bytes < its floor 1048576", "algo=singlecopy"}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s; want it to contain %s", i, lines[i], w)
		}
	}
}

// BenchmarkPick: the table's cost on every call, for small allreduces
// of two sizes in turn (so that decide's memory of the last call does
// not answer), float32 and 16-bit.
func BenchmarkPick(b *testing.B) {
	g := &Group{n: 4, opts: Options{SmallAllReduce: 64 << 10, SmallAllReducePow2: 16 << 10, RingChunk: 256 << 10}}
	for _, bc := range []struct {
		name string
		dt   reduce.DType
	}{{"float32", reduce.Float32}, {"float16", reduce.Float16}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				g.chooseReduction(AllReduce, bc.dt, reduce.Sum, 8<<(i&1))
			}
		})
	}
}

// TestExactChoice pins the row of an exact sum: the pairwise
// reduce-scatter at every size and rank count from 2, whatever
// GOCOLL_ALGO forces and whatever the transport's step costs.
func TestExactChoice(t *testing.T) {
	tcp := Options{SmallAllReduce: 64 << 10, SmallAllReducePow2: 16 << 10, RingChunk: 256 << 10}
	forced := Options{SmallAllReduce: 64 << 10, Algos: map[Kind]Algo{AllReduce: Ring, ReduceScatter: Ring}}
	cases := []struct {
		opts     Options
		kind     Kind
		n, bytes int
		dt       reduce.DType
		want     Algo
	}{
		{tcp, AllReduce, 1, 8, reduce.Float32, Local},
		{tcp, AllReduce, 2, 8, reduce.Float32, Pairwise},
		{tcp, AllReduce, 4, 64 << 10, reduce.Float32, Pairwise},
		{tcp, AllReduce, 8, 64 << 10, reduce.Float16, Pairwise},
		{tcp, AllReduce, 3, 8, reduce.Float64, Pairwise},
		{tcp, AllReduce, 6, 8, reduce.Float32, Pairwise},
		{tcp, AllReduce, 4, 16 << 20, reduce.Float32, Pairwise},
		{forced, AllReduce, 4, 8, reduce.BFloat16, Pairwise},
		{forced, AllReduce, 4, 1 << 20, reduce.Float32, Pairwise},
		{forced, ReduceScatter, 4, 8, reduce.Float32, Pairwise},
		{tcp, Reduce, 4, 8, reduce.Float32, Pairwise},
		{tcp, ReduceScatterV, 2, 8, reduce.Float64, Pairwise},
	}
	for _, tc := range cases {
		g := &Group{n: tc.n, opts: tc.opts}
		for k, a := range tc.opts.Algos {
			g.forced[k] = a
		}
		got, why := g.Choice(tc.kind, tc.bytes, tc.dt, reduce.ExactSum)
		if got != tc.want || !strings.Contains(why, "exactsum") && got != Local {
			t.Errorf("%v n=%d %d bytes of %v: %v (%s), want %v", tc.kind, tc.n, tc.bytes, tc.dt, got, why, tc.want)
		}
	}
	// Integers: ExactSum is Sum, and takes Sum's table.
	g := &Group{n: 4, opts: tcp}
	if got, _ := g.Choice(AllReduce, 1<<20, reduce.Int32, reduce.ExactSum); got != Ring {
		t.Errorf("int32 ExactSum, 4 ranks, 1 MiB: %v, want Sum's Ring", got)
	}
}
