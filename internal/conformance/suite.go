// Package conformance is the test suite every transport must pass: every
// collective, every algorithm, every element type and op, rank counts from
// 1 to 8 and sizes from 0 to 64 MiB, compared exactly with a serial
// reference, plus bitwise agreement between ranks, rounding within the
// documented tolerance, argument mismatches and cancellation. A transport's
// tests call Run with a function that builds an in-process mesh of n ranks;
// nothing here knows which transport it is testing.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/internal/testmode"
	"github.com/gocoll/gocoll/transport"
)

// Mesh builds n connected transports, one per rank, in this process, and
// arranges (t.Cleanup) for them to be closed.
type Mesh func(t testing.TB, n int) []transport.Transport

// RankCounts are the job sizes the suite runs: 1, powers of two and not.
var RankCounts = []int{1, 2, 3, 4, 5, 8}

func unsafeBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}

// job is n ranks' Groups over one mesh, with the given algorithm override.
type job struct {
	n      int
	groups []*collectives.Group
}

func newJob(ts []transport.Transport, algos map[collectives.Kind]collectives.Algo) *job {
	j := &job{n: len(ts)}
	for _, t := range ts {
		j.groups = append(j.groups, collectives.NewGroup(t, collectives.Options{Algos: algos}))
	}
	return j
}

// run calls f on every rank at once and returns each rank's error. A
// collective that does not finish in time fails the test rather than hang it.
func (j *job) run(t testing.TB, f func(ctx context.Context, rank int, g *collectives.Group) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, j.n)
	var wg sync.WaitGroup
	for r := 0; r < j.n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = f(ctx, r, j.groups[r])
		}(r)
	}
	wg.Wait()
	return errs
}

func (j *job) mustRun(t testing.TB, f func(ctx context.Context, rank int, g *collectives.Group) error) {
	t.Helper()
	for r, err := range j.run(t, f) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// sizes are the element counts tried for a job of n ranks whose transport
// carries maxMsg bytes per message: empty, one element, fewer elements than
// ranks, primes, counts not divisible by n, and counts that span several
// messages without filling the last.
func sizes(n, maxMsg, es int) []int {
	perMsg := maxMsg / es
	s := []int{0, 1, 2, 61, 4099, perMsg + perMsg/2 + 17}
	if n > 2 {
		s = append(s, n-1, n+1)
	}
	return s
}

// Run runs the whole suite over mesh.
func Run(t *testing.T, mesh Mesh) { run(t, mesh, []int{2, 3}, nil) }

// RunVariant runs the whole suite over mesh, a variant of a transport
// whose own mesh Run tests (tiny slots, encryption, a hybrid of two):
// in the quick check on 3 ranks alone, beside the 2 and 3 of Run's
// quick run; otherwise as Run does.
// Under the race detector it runs 2 and 3 ranks: the variant's own
// concurrency (credits in tiny slots, sealing, two transports in one
// job) is there at 3 ranks, and the run without the detector has 8.
func RunVariant(t *testing.T, mesh Mesh) { run(t, mesh, []int{3}, []int{2, 3}) }

// run is Run, with quick the rank counts of the quick check and race
// those under the race detector (nil: as without it).
func run(t *testing.T, mesh Mesh, quick, race []int) {
	counts := RankCounts
	switch {
	case testmode.Quick():
		counts = quick
	case testmode.Race() && race != nil:
		counts = race
	case testmode.Sampled():
		// 5 ranks, neither a power of two nor the smallest such, tells a
		// transport nothing that 3 and 8 do not, nor 4, a power of two
		// with fewer steps and peers, than 8.
		counts = []int{1, 2, 3, 8}
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := mesh(t, n)
			t.Run("AllReduce", func(t *testing.T) { testAllReduce(t, ts) })
			t.Run("Broadcast", func(t *testing.T) { testBroadcast(t, ts) })
			t.Run("AllGather", func(t *testing.T) { testAllGather(t, ts) })
			t.Run("ReduceScatter", func(t *testing.T) { testReduceScatter(t, ts) })
			t.Run("Barrier", func(t *testing.T) { testBarrier(t, ts) })
			t.Run("RandomFloats", func(t *testing.T) { testRandomFloats(t, ts) })
			if !testmode.Sampled() || n <= 3 {
				// Sampled, ExactSum runs on 1 to 3 ranks: its one
				// algorithm sends what the pairwise reduce-scatter
				// and a direct allgather send, which the AllReduce
				// (pairwise) and AllGather cases send at 8 ranks too;
				// what 8 adds, an owner holding a slot of each of 7
				// peers at once, the full run checks over tcp and shm.
				// Its exact kernel made it a large share of the 8-rank
				// time under the race detector and in the RDMA VM.
				t.Run("ExactSum", func(t *testing.T) { testExactSum(t, ts) })
			}
			t.Run("Reduce", func(t *testing.T) { testReduce(t, ts) })
			t.Run("Gather", func(t *testing.T) { testGather(t, ts) })
			t.Run("Scatter", func(t *testing.T) { testScatter(t, ts) })
			t.Run("AllGatherV", func(t *testing.T) { testAllGatherV(t, ts) })
			t.Run("ReduceScatterV", func(t *testing.T) { testReduceScatterV(t, ts) })
			t.Run("AllToAll", func(t *testing.T) { testAllToAll(t, ts) })
			t.Run("AllToAllV", func(t *testing.T) { testAllToAllV(t, ts) })
			t.Run("Invalid", func(t *testing.T) { testInvalid(t, ts) })
			t.Run("Mux", func(t *testing.T) { testMux(t, mesh, n) })
			if n > 1 {
				t.Run("Mismatch", func(t *testing.T) { testMismatch(t, mesh, n) })
				t.Run("Cancel", func(t *testing.T) { testCancel(t, mesh, n) })
			}
		})
	}
	t.Run("Large", func(t *testing.T) {
		testmode.SkipIfQuick(t)
		testLarge(t, mesh)
	})
}

// algoJob is a job whose calls of one kind run the algorithm name
// forces ("auto": the table's choice).
type algoJob struct {
	name string
	*job
}

// algoJobs is a job for the table's choice, first, and one forcing each
// of names on kind, in that order.
func algoJobs(ts []transport.Transport, kind collectives.Kind, names ...string) []algoJob {
	jobs := []algoJob{{"auto", newJob(ts, nil)}}
	for _, name := range names {
		algos, err := collectives.ParseAlgos(kind.String() + "=" + name)
		if err != nil {
			panic(err)
		}
		jobs = append(jobs, algoJob{name, newJob(ts, algos)})
	}
	return jobs
}

// heavy says whether a (type, op) pair also runs the multi-message sizes;
// every pair runs the small ones. Every type runs them with Sum and every
// op with float32 (with -short, only the three element sizes' sums).
func heavy(dt reduce.DType, op reduce.Op) bool {
	if testing.Short() && testmode.Sampled() {
		// A message cut from a float32 buffer is a message cut from an
		// int8 one to a transport; 16-bit floats travel widened.
		return op == reduce.Sum && (dt == reduce.Float32 || dt == reduce.Float16)
	}
	if testing.Short() {
		return op == reduce.Sum && (dt == reduce.Float32 || dt == reduce.Int8 || dt == reduce.Float16)
	}
	return op == reduce.Sum || dt == reduce.Float32
}

func testAllReduce(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	maxMsg := ts[0].MaxMessage()
	jobs := algoJobs(ts, collectives.AllReduce, "ring", "rd", "rabenseifner", "tree", "pairwise")
	for _, dt := range suiteTypes() {
		for _, op := range suiteOps(dt) {
			if reduce.Check(dt, op) != nil {
				continue
			}
			for _, count := range sizes(n, maxMsg, dt.Size()) {
				if count > 4099 && !heavy(dt, op) {
					continue
				}
				ins, want := reduceCase(op, dt, n, count)
				for _, j := range jobs {
					if (j.name == "rabenseifner" || j.name == "tree" || j.name == "pairwise") && !heavy(dt, op) {
						// Their data paths do not depend on the type or op
						// beyond what ring and rd already cover for every pair.
						continue
					}
					t.Run(fmt.Sprintf("%s/%v/%v/%d", j.name, dt, op, count), func(t *testing.T) {
						bufs := clone(ins)
						j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
							return g.AllReduce(ctx, bufs[r], dt, op)
						})
						for r := range bufs {
							if i := firstDiff(bufs[r], want, dt.Size()); i >= 0 {
								t.Fatalf("rank %d element %d of %d: got %v, want %v", r, i, count, get(dt, bufs[r], i), get(dt, want, i))
							}
						}
					})
				}
			}
		}
	}
}

// reduceCase is the n ranks' inputs of count elements for op and dt, and
// their reduction: made once, and cloned for each algorithm, as making
// them cost more than most calls they feed.
func reduceCase(op reduce.Op, dt reduce.DType, n, count int) (ins [][]byte, want []byte) {
	ins = make([][]byte, n)
	for r := range ins {
		ins[r] = fill(op, dt, r, count)
	}
	want = alignedBytes(count * dt.Size())
	for i := 0; i < count; i++ {
		put(dt, want, i, reference(op, dt, n, i))
	}
	return ins, want
}

func firstDiff(a, b []byte, es int) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := 0; i+es <= len(a); i += es {
		if !bytes.Equal(a[i:i+es], b[i:i+es]) {
			return i / es
		}
	}
	return len(a) / es
}

func testBroadcast(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	maxMsg := ts[0].MaxMessage()
	jobs := algoJobs(ts, collectives.Broadcast, "binomial", "chain")
	for _, dt := range []reduce.DType{reduce.Uint8, reduce.Float16, reduce.Float64} {
		for _, count := range sizes(n, maxMsg, dt.Size()) {
			ins := make([][]byte, n)
			for r := range ins {
				ins[r] = fill(reduce.Sum, dt, r+1, count) // distinct per rank
			}
			for _, root := range uniq(0, n-1, n/2) {
				for _, j := range jobs {
					t.Run(fmt.Sprintf("%s/%v/root=%d/%d", j.name, dt, root, count), func(t *testing.T) {
						bufs := clone(ins)
						want := ins[root]
						j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
							return g.Broadcast(ctx, bufs[r], dt, root)
						})
						for r := range bufs {
							if i := firstDiff(bufs[r], want, dt.Size()); i >= 0 {
								t.Fatalf("rank %d element %d: got %v, want %v", r, i, get(dt, bufs[r], i), get(dt, want, i))
							}
						}
					})
				}
			}
		}
	}
	// A root outside the job is refused on every rank, and the job goes on.
	j := newJob(ts, nil)
	for r, err := range j.run(t, func(ctx context.Context, r int, g *collectives.Group) error {
		return g.Broadcast(ctx, make([]byte, 8), reduce.Uint8, n)
	}) {
		if err == nil {
			t.Errorf("rank %d: broadcast from root %d of %d ranks succeeded", r, n, n)
		}
	}
	testBarrier(t, ts)
}

func uniq(xs ...int) []int {
	var out []int
	seen := map[int]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func testAllGather(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for _, dt := range []reduce.DType{reduce.Uint8, reduce.Int32, reduce.BFloat16, reduce.Float64} {
		for _, count := range sizes(n, ts[0].MaxMessage(), dt.Size()) {
			t.Run(fmt.Sprintf("%v/%d", dt, count), func(t *testing.T) {
				sends := make([][]byte, n)
				recvs := make([][]byte, n)
				want := alignedBytes(n * count * dt.Size())
				for r := range sends {
					sends[r] = fill(reduce.Sum, dt, r+3, count)
					copy(want[r*count*dt.Size():], sends[r])
					recvs[r] = alignedBytes(n * count * dt.Size())
				}
				j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
					return g.AllGather(ctx, sends[r], recvs[r], dt)
				})
				for r := range recvs {
					if i := firstDiff(recvs[r], want, dt.Size()); i >= 0 {
						t.Fatalf("rank %d element %d (from rank %d): got %v, want %v", r, i, i/max(count, 1), get(dt, recvs[r], i), get(dt, want, i))
					}
				}
			})
		}
	}
}

func testReduceScatter(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	// Auto is the ring, or pairwise for the wide 16-bit reductions from 3
	// ranks on (the rules of collectives, choose.go); each is also forced on the
	// heavy pairs.
	jobs := algoJobs(ts, collectives.ReduceScatter, "ring", "pairwise")
	for _, dt := range suiteTypes() {
		for _, op := range suiteOps(dt) {
			if reduce.Check(dt, op) != nil {
				continue
			}
			for _, count := range sizes(n, ts[0].MaxMessage(), dt.Size()) {
				if count > 4099 && !heavy(dt, op) {
					continue
				}
				ins, want := reduceCase(op, dt, n, n*count)
				for _, j := range jobs {
					if j.name != "auto" && !heavy(dt, op) {
						continue
					}
					t.Run(fmt.Sprintf("%s/%v/%v/%d", j.name, dt, op, count), func(t *testing.T) {
						es := dt.Size()
						sends := clone(ins) // the collective may use them as scratch
						recvs := make([][]byte, n)
						for r := range recvs {
							recvs[r] = alignedBytes(count * es)
						}
						j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
							return g.ReduceScatter(ctx, sends[r], recvs[r], dt, op)
						})
						for r := range recvs {
							block := want[r*count*es : (r+1)*count*es]
							if i := firstDiff(recvs[r], block, es); i >= 0 {
								t.Fatalf("rank %d element %d: got %v, want %v", r, i, get(dt, recvs[r], i), get(dt, block, i))
							}
						}
					})
				}
			}
		}
	}
}

// testBarrier checks the barrier's one promise: nobody leaves before
// everybody has arrived. Ranks arrive at staggered times; each one, on
// leaving, must see every rank's arrival mark.
func testBarrier(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	j := newJob(ts, nil)
	for round := 0; round < 5; round++ {
		var mu sync.Mutex
		arrived := make([]bool, n)
		j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
			time.Sleep(time.Duration((r*7+round*3)%5) * time.Millisecond)
			mu.Lock()
			arrived[r] = true
			mu.Unlock()
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for q, ok := range arrived {
				if !ok {
					return fmt.Errorf("left the barrier before rank %d arrived", q)
				}
			}
			return nil
		})
	}
}

// FloatTolerance is the documented accuracy of a floating-point sum over
// n ranks: each element is within n*eps*sum(|x_q|) of the exact sum, where
// eps is the type's unit roundoff (the bound for any summation order).
func FloatTolerance(dt reduce.DType, n int, absSum float64) float64 {
	eps := map[reduce.DType]float64{
		reduce.Float32: 0x1p-24, reduce.Float64: 0x1p-53, reduce.Float16: 0x1p-11, reduce.BFloat16: 0x1p-8,
	}[dt]
	return float64(n) * eps * absSum * 2
}

// testRandomFloats runs allreduce on random floats, NaN and infinities
// included: every rank must end with exactly the same bits, and each sum
// within FloatTolerance of the exact one.
func testRandomFloats(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	jobs := algoJobs(ts, collectives.AllReduce, "ring", "rd", "rabenseifner", "tree", "pairwise")
	for _, dt := range []reduce.DType{reduce.Float32, reduce.Float64, reduce.Float16, reduce.BFloat16} {
		for _, op := range []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Prod} {
			count := 10007
			rng := rand.New(rand.NewSource(int64(n*1000 + int(dt)*10 + int(op))))
			inputs := make([][]float64, n)
			ins := make([][]byte, n)
			for r := range ins {
				ins[r] = alignedBytes(count * dt.Size())
				inputs[r] = make([]float64, count)
				for i := range inputs[r] {
					v := rng.NormFloat64() * 100
					switch rng.Intn(200) {
					case 0:
						v = math.NaN()
					case 1:
						v = math.Inf(1)
					case 2:
						v = math.Copysign(0, -1)
					}
					put(dt, ins[r], i, v)
					inputs[r][i] = get(dt, ins[r], i) // as rounded to dt
				}
			}
			for _, j := range jobs {
				t.Run(fmt.Sprintf("%s/%v/%v", j.name, dt, op), func(t *testing.T) {
					bufs := clone(ins)
					j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
						return g.AllReduce(ctx, bufs[r], dt, op)
					})
					for r := 1; r < n; r++ {
						if i := firstDiff(bufs[r], bufs[0], dt.Size()); i >= 0 {
							t.Fatalf("rank %d and rank 0 disagree at element %d: %v vs %v (bits differ)", r, i, get(dt, bufs[r], i), get(dt, bufs[0], i))
						}
					}
					if op != reduce.Sum {
						return // Min/Max are exact; Prod overflows; agreement is the point
					}
					for i := 0; i < count; i++ {
						exact, abs, special := 0.0, 0.0, false
						for r := 0; r < n; r++ {
							x := inputs[r][i]
							if math.IsNaN(x) || math.IsInf(x, 0) {
								special = true
							}
							exact += x
							abs += math.Abs(x)
						}
						got := get(dt, bufs[0], i)
						if special {
							if !math.IsNaN(got) && !math.IsInf(got, 0) {
								t.Fatalf("element %d: NaN/Inf input, got finite %v", i, got)
							}
							continue
						}
						if d := math.Abs(got - exact); d > FloatTolerance(dt, n, abs) && !math.IsInf(got, 0) {
							t.Fatalf("element %d: got %v, exact sum %v, error %g over tolerance %g", i, got, exact, d, FloatTolerance(dt, n, abs))
						}
					}
				})
			}
		}
	}
}

// testMismatch has ranks disagree about a collective: they must get
// ErrMismatch, not hang and not corrupt data. With two ranks both sides see
// the other's header; with more, at least the ranks next to a disagreeing
// one do, and the rest are released by cancellation (as a timeout would).
func testMismatch(t *testing.T, mesh Mesh, n int) {
	cases := []struct {
		name string
		call func(ctx context.Context, r int, g *collectives.Group) error
	}{
		{"count", func(ctx context.Context, r int, g *collectives.Group) error {
			return g.AllReduce(ctx, make([]byte, 4*(100+r%2)), reduce.Float32, reduce.Sum)
		}},
		{"op", func(ctx context.Context, r int, g *collectives.Group) error {
			op := reduce.Sum
			if r%2 == 1 {
				op = reduce.Max
			}
			return g.AllReduce(ctx, make([]byte, 64), reduce.Float32, op)
		}},
		{"kind", func(ctx context.Context, r int, g *collectives.Group) error {
			if r%2 == 1 {
				return g.Broadcast(ctx, make([]byte, 64), reduce.Float32, 0)
			}
			return g.AllReduce(ctx, make([]byte, 64), reduce.Float32, reduce.Sum)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := mesh(t, n) // a fresh mesh: a failed collective leaves the old one out of step
			j := newJob(ts, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					errs[r] = tc.call(ctx, r, j.groups[r])
					if errors.Is(errs[r], collectives.ErrMismatch) {
						time.AfterFunc(200*time.Millisecond, cancel)
					}
				}(r)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cancel()
				t.Fatal("mismatched collective hung")
			}
			found := 0
			for r, err := range errs {
				if err == nil {
					t.Errorf("rank %d: mismatched collective succeeded", r)
				}
				if errors.Is(err, collectives.ErrMismatch) {
					found++
					t.Logf("rank %d: %v", r, err)
				}
			}
			if found == 0 {
				t.Fatalf("no rank reported ErrMismatch: %v", errs)
			}
		})
	}
}

// testCancel starts an allreduce that can never finish (the last rank
// does not join) and cancels it: every waiting rank must return the
// context's error promptly.
func testCancel(t *testing.T, mesh Mesh, n int) {
	ts := mesh(t, n)
	j := newJob(ts, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make([]error, n-1)
	var wg sync.WaitGroup
	for r := 0; r < n-1; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = j.groups[r].AllReduce(ctx, make([]byte, 4<<20), reduce.Float32, reduce.Sum)
		}(r)
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	wg.Wait()
	// Without the cancel the call would wait forever; "promptly" here is
	// a bound a loaded machine (-race, a load of 40 on 2 cores) keeps.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancelled allreduce took %v to return", d)
	}
	for r, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("rank %d: got %v, want context.Canceled", r, err)
		}
	}
}

// testLarge runs a float32 sum of at least 64 MiB (16M+3 elements: not a
// multiple of any rank count or message size) on a few job sizes.
func testLarge(t *testing.T, mesh Mesh) {
	count := 16<<20 + 3
	ns := []int{2, 3, 8}
	if testing.Short() {
		count, ns = 1<<20+3, []int{3}
	}
	for _, n := range ns {
		t.Run(fmt.Sprintf("n=%d/%dB", n, 4*count), func(t *testing.T) {
			ts := mesh(t, n)
			j := newJob(ts, nil)
			bufs := make([][]float32, n)
			for r := range bufs {
				bufs[r] = make([]float32, count)
				for i := range bufs[r] {
					bufs[r][i] = float32((r*31 + i) % 1000)
				}
			}
			j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
				b := unsafe.Slice((*byte)(unsafe.Pointer(&bufs[r][0])), 4*count)
				return g.AllReduce(ctx, b, reduce.Float32, reduce.Sum)
			})
			for r := range bufs {
				for i, got := range bufs[r] {
					var want float32
					for q := 0; q < n; q++ {
						want += float32((q*31 + i) % 1000)
					}
					if got != want {
						t.Fatalf("rank %d element %d: got %v, want %v", r, i, got, want)
					}
				}
			}
		})
	}
}
