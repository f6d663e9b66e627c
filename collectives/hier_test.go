package collectives_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/internal/testmode"
)

// hierLayouts are the host maps the pipelined hierarchical allreduce is
// tested on: even, uneven with the lone rank last, and uneven with it
// first (a leader without children beside a host of four).
var hierLayouts = []struct {
	name  string
	hosts []int
}{
	{"2x2", []int{0, 0, 1, 1}},
	{"3+1", []int{0, 0, 0, 1}},
	{"1+4", []int{0, 1, 1, 1, 1}},
}

// allTypes and allOps are every element type and op; the pairs
// reduce.Check refuses are left out where they are used.
var (
	allTypes = []reduce.DType{reduce.Int8, reduce.Uint8, reduce.Int16, reduce.Uint16, reduce.Int32, reduce.Uint32,
		reduce.Int64, reduce.Uint64, reduce.Float16, reduce.BFloat16, reduce.Float32, reduce.Float64}
	allOps = []reduce.Op{reduce.Sum, reduce.Prod, reduce.Min, reduce.Max, reduce.Avg, reduce.ExactSum}
)

// TestHierPipeExact runs the pipelined hierarchical allreduce (forced,
// with stages of 4 KiB and of 192 KiB, the latter's parts longer than a
// message) on every layout, type and op, at sizes that are not a whole
// number of stages, on inputs whose reduction is exact in every type
// whatever the order, and compares every rank's result with a serial
// reference.
func TestHierPipeExact(t *testing.T) {
	for _, lay := range hierLayouts {
		for _, seg := range []int{4 << 10, 192 << 10} {
			for _, dt := range allTypes {
				for _, op := range allOps {
					if reduce.Check(dt, op) != nil || op == reduce.ExactSum && dt.IsFloat() {
						// ExactSum of floats has a path of its own, never hier.
						continue
					}
					counts := []int{0, 1, 5, 3*seg/dt.Size() + 13}
					if seg > 4<<10 {
						// The long parts once per type and once per op.
						if op != reduce.Sum && dt != reduce.Float32 || testmode.Quick() {
							continue
						}
						counts = counts[3:]
					}
					for _, count := range counts {
						t.Run(fmt.Sprintf("%s/seg=%d/%v/%v/%d", lay.name, seg, dt, op, count), func(t *testing.T) {
							n := len(lay.hosts)
							ins := make([][]byte, n)
							for r := range ins {
								ins[r] = exactInput(dt, op, n, r, count)
							}
							want := serialReference(dt, op, ins)
							got := runHier(t, lay.hosts, collectives.HierPipe, seg, dt, op, ins)
							for r := range got {
								if i := firstDiffAt(got[r], want, dt.Size()); i >= 0 {
									t.Fatalf("rank %d, element %d of %d: % x, want % x", r, i, count,
										got[r][i*dt.Size():(i+1)*dt.Size()], want[i*dt.Size():(i+1)*dt.Size()])
								}
							}
						})
					}
				}
			}
		}
	}
}

// TestHierPipeSameBits runs the pipelined and the phase-by-phase
// hierarchical allreduce on random floats, whose sums depend on the
// order of the additions: the two must agree bit for bit, on every rank
// (the pipelined path reduces every element in the old order), 16-bit
// sums in float32 included.
func TestHierPipeSameBits(t *testing.T) {
	rng := rand.New(rand.NewSource(44))
	for _, lay := range hierLayouts {
		n := len(lay.hosts)
		for _, tc := range []struct {
			dt    reduce.DType
			op    reduce.Op
			count int
		}{
			{reduce.Float32, reduce.Sum, 100_003},
			{reduce.Float64, reduce.Avg, 12_345},
			{reduce.Float16, reduce.Sum, 70_001},
			{reduce.BFloat16, reduce.Avg, 70_001},
			{reduce.Float32, reduce.Prod, 3001},
		} {
			t.Run(fmt.Sprintf("%s/%v/%v/%d", lay.name, tc.dt, tc.op, tc.count), func(t *testing.T) {
				ins := make([][]byte, n)
				for r := range ins {
					ins[r] = randomFloats(rng, tc.dt, tc.count)
				}
				old := runHier(t, lay.hosts, collectives.Hier, 0, tc.dt, tc.op, ins)
				got := runHier(t, lay.hosts, collectives.HierPipe, 8<<10, tc.dt, tc.op, ins)
				for r := range got {
					if !bytes.Equal(got[r], got[0]) {
						t.Fatalf("rank %d's result differs from rank 0's (element %d)", r, firstDiffAt(got[r], got[0], tc.dt.Size()))
					}
					if i := firstDiffAt(got[r], old[r], tc.dt.Size()); i >= 0 {
						t.Fatalf("rank %d, element %d: pipelined % x, phase by phase % x", r, i,
							got[r][i*tc.dt.Size():(i+1)*tc.dt.Size()], old[r][i*tc.dt.Size():(i+1)*tc.dt.Size()])
					}
				}
			})
		}
	}
}

// TestHierPipeCancel: a call whose context ends while the leaders'
// phases run on their goroutines returns the context's error on every
// rank, and returns: none of the phases is left waiting.
func TestHierPipeCancel(t *testing.T) {
	hosts := []int{0, 0, 1, 1}
	n := len(hosts)
	mesh := newPipes(n)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan []error)
	go func() {
		done <- onRanks(n, func(r int) error {
			if r == 3 {
				// Rank 3 never calls: the others wait for it until the
				// context ends.
				return nil
			}
			g := collectives.NewGroup(mesh[r], collectives.Options{Hosts: hosts, HierSegment: 4 << 10,
				Algos: map[collectives.Kind]collectives.Algo{collectives.AllReduce: collectives.HierPipe}})
			return g.AllReduce(ctx, make([]byte, 1<<20), reduce.Float32, reduce.Sum)
		})
	}()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the call did not return after its context ended")
	}
	for r := 0; r < 3; r++ {
		if !errors.Is(errs[r], context.Canceled) {
			t.Errorf("rank %d: %v, want context.Canceled", r, errs[r])
		}
	}
}

// runHier runs one allreduce of ins (one buffer per rank, left as they
// are) with algo forced on goroutine ranks over newPipes, on the host
// map hosts, with stages of segment bytes (0: the default), and returns
// every rank's result.
func runHier(t *testing.T, hosts []int, algo collectives.Algo, segment int, dt reduce.DType, op reduce.Op, ins [][]byte) [][]byte {
	t.Helper()
	n := len(hosts)
	mesh := newPipes(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([][]byte, n)
	errs := onRanks(n, func(r int) error {
		g := collectives.NewGroup(mesh[r], collectives.Options{Hosts: hosts, HierSegment: segment,
			Algos: map[collectives.Kind]collectives.Algo{collectives.AllReduce: algo}})
		out[r] = bytes.Clone(ins[r])
		return g.AllReduce(ctx, out[r], dt, op)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// onRanks runs f for every rank r of n at once, each on a goroutine, as
// ranks in processes of their own would, and returns each one's error.
func onRanks(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

// exactInput is rank r's input of count elements of dt for op, small
// integers whose reduction over n ranks is exact in every type in any
// order: sums of at most a few dozen (and, for Avg, a multiple of n),
// products of at most n factors of magnitude 2 or less. Integer types
// wrap alike in any order.
func exactInput(dt reduce.DType, op reduce.Op, n, r, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		var v int
		switch op {
		case reduce.Prod:
			v = []int{1, -1, 2, -2, 1, 2, -1}[(r*3+i)%7]
		case reduce.Min, reduce.Max:
			v = (r*5+i*3)%23 - 11
		default:
			// a + d(r), the d summing to 0 over the ranks: the sum is
			// n*a, and the average a.
			a := i%7 - 3
			d := (r + i) % 3
			if r == n-1 {
				d = 0
				for q := 0; q < n-1; q++ {
					d -= (q + i) % 3
				}
			}
			v = a + d
		}
		putInt(dt, b, i, v)
	}
	return b
}

// putInt stores v as element i of b.
func putInt(dt reduce.DType, b []byte, i, v int) {
	switch es := dt.Size(); {
	case dt == reduce.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case dt == reduce.Float64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(v)))
	case dt == reduce.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], reduce.F32ToF16(float32(v)))
	case dt == reduce.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], reduce.F32ToBF16(float32(v)))
	default:
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], uint64(int64(v)))
		copy(b[es*i:es*(i+1)], w[:es])
	}
}

// serialReference reduces ins in rank order, one element at a time
// (Avg: the sum, divided once), through the kernels every algorithm
// uses.
func serialReference(dt reduce.DType, op reduce.Op, ins [][]byte) []byte {
	acc := bytes.Clone(ins[0])
	rop := op
	if op == reduce.Avg || op == reduce.ExactSum {
		rop = reduce.Sum
	}
	for _, in := range ins[1:] {
		reduce.Reduce(dt, rop, acc, acc, in)
	}
	if op == reduce.Avg {
		reduce.Scale(dt, acc, len(ins))
	}
	return acc
}

// randomFloats is count random floats of dt, of mixed magnitudes, whose
// sums round differently in different orders.
func randomFloats(rng *rand.Rand, dt reduce.DType, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		f := (rng.Float64()*2 - 1) * math.Pow(2, float64(rng.Intn(12)-6))
		switch dt {
		case reduce.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(f)))
		case reduce.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
		case reduce.Float16:
			binary.LittleEndian.PutUint16(b[2*i:], reduce.F32ToF16(float32(f)))
		case reduce.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], reduce.F32ToBF16(float32(f)))
		}
	}
	return b
}

// firstDiffAt is the first element at which a and b differ, or -1.
func firstDiffAt(a, b []byte, es int) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := 0; i+es <= min(len(a), len(b)); i += es {
		if !bytes.Equal(a[i:i+es], b[i:i+es]) {
			return i / es
		}
	}
	return min(len(a), len(b)) / es
}
