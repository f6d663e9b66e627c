package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/exactref"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/internal/testmode"
	"github.com/gocoll/gocoll/transport"
)

// ExactSum's result is the exact sum rounded once, so it is compared,
// bit for bit, with exactref's math/big reference on adversarial inputs
// (exponents over the whole range, subnormals, cancellations, ties, Inf
// and NaN), under every GOCOLL_ALGO override of the collective: the bits
// must not depend on the algorithm, and, the inputs being the same on
// every transport, not on the transport either.

var exactFormats = map[reduce.DType]exactref.Format{
	reduce.Float16: exactref.Float16, reduce.BFloat16: exactref.BFloat16,
	reduce.Float32: exactref.Float32, reduce.Float64: exactref.Float64,
}

func elemBits(dt reduce.DType, b []byte, i int) uint64 {
	switch dt.Size() {
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

func putElemBits(dt reduce.DType, b []byte, i int, v uint64) {
	switch dt.Size() {
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

// exactInputs are n ranks' adversarial inputs of count elements of dt,
// and the reference sum of each element. Beyond the first 4096 elements
// only one in 61 is adversarial, the others ordinary: the reference's
// cost is in the adversarial ones, and the multi-message sizes are there
// for the segments, which the ordinary values fill.
func exactInputs(dt reduce.DType, n, count int, seed int64) (ins [][]byte, want []byte) {
	f := exactFormats[dt]
	rng := rand.New(rand.NewSource(seed))
	es := dt.Size()
	ins = make([][]byte, n)
	for q := range ins {
		ins[q] = alignedBytes(count * es)
	}
	want = alignedBytes(count * es)
	xs := make([]uint64, 0, n)
	for i := 0; i < count; i++ {
		xs = xs[:0]
		for q := range ins {
			var v uint64
			if i >= 4096 && i%61 != 0 {
				v = exactref.Ordinary(rng, f)
			} else {
				v = exactref.Adversarial(rng, f, xs)
			}
			xs = append(xs, v)
			putElemBits(dt, ins[q], i, v)
		}
		putElemBits(dt, want, i, exactref.Sum(f, xs))
	}
	return ins, want
}

// checkExactBits fails t at got's first element that differs from want.
func checkExactBits(t *testing.T, what string, dt reduce.DType, got, want []byte, ins [][]byte, off int) {
	t.Helper()
	i := firstDiff(got, want, dt.Size())
	if i < 0 {
		return
	}
	f := exactFormats[dt]
	var xs []float64
	for _, in := range ins {
		xs = append(xs, exactref.Value(f, elemBits(dt, in, off+i)))
	}
	t.Fatalf("%s: element %d, sum of %v: got %#x (%v), want %#x (%v)", what, off+i, xs,
		elemBits(dt, got, i), exactref.Value(f, elemBits(dt, got, i)), elemBits(dt, want, i), exactref.Value(f, elemBits(dt, want, i)))
}

func clone(bs [][]byte) [][]byte {
	out := make([][]byte, len(bs))
	for q, b := range bs {
		out[q] = alignedBytes(len(b))
		copy(out[q], b)
	}
	return out
}

func testExactSum(t *testing.T, ts []transport.Transport) {
	n := len(ts)
	maxMsg := ts[0].MaxMessage()
	types := []reduce.DType{reduce.Float32, reduce.Float64, reduce.Float16, reduce.BFloat16}
	if testmode.Sampled() {
		// One algorithm computes ExactSum whatever the override (see
		// collectives/exact.go), so the overrides send a transport the
		// same messages as auto (only auto runs); and bfloat16 travels
		// as float16 does. The full suite tries them all.
		types = []reduce.DType{reduce.Float32, reduce.Float64, reduce.Float16}
	}
	counts := func(dt reduce.DType) []int {
		c := []int{1, n + 1, 1031}
		if dt == reduce.Float32 {
			// Several messages per block.
			c = append(c, n*(maxMsg/dt.Size()+maxMsg/dt.Size()/2+17))
		}
		return c
	}
	allreduce := algoJobs(ts, collectives.AllReduce, "ring", "rd", "rabenseifner", "tree", "pairwise")
	for _, dt := range types {
		for _, count := range counts(dt) {
			ins, want := exactInputs(dt, n, count, int64(n*100000+int(dt)*1000+count))
			for _, j := range allreduce {
				if testmode.Sampled() && j.name != "auto" {
					continue
				}
				t.Run(fmt.Sprintf("AllReduce/%s/%v/%d", j.name, dt, count), func(t *testing.T) {
					bufs := clone(ins)
					j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
						return g.AllReduce(ctx, bufs[r], dt, reduce.ExactSum)
					})
					for r := range bufs {
						checkExactBits(t, fmt.Sprintf("rank %d", r), dt, bufs[r], want, ins, 0)
					}
				})
			}
		}
	}
	rs := algoJobs(ts, collectives.ReduceScatter, "ring", "pairwise")
	for _, j := range rs {
		if testmode.Sampled() && j.name != "auto" {
			continue
		}
		for _, dt := range types {
			t.Run(fmt.Sprintf("ReduceScatter/%s/%v", j.name, dt), func(t *testing.T) {
				block := 257
				ins, want := exactInputs(dt, n, n*block, int64(n*7+int(dt)))
				es := dt.Size()
				recv := make([][]byte, n)
				j.mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
					recv[r] = alignedBytes(block * es)
					return g.ReduceScatter(ctx, ins[r], recv[r], dt, reduce.ExactSum)
				})
				for r := range recv {
					checkExactBits(t, fmt.Sprintf("rank %d", r), dt, recv[r], want[r*block*es:(r+1)*block*es], ins, r*block)
				}
			})
		}
	}
	for _, dt := range types {
		t.Run(fmt.Sprintf("ReduceScatterV/%v", dt), func(t *testing.T) {
			counts := make([]int, n)
			offs := make([]int, n+1)
			for q := range counts {
				counts[q] = (q*37 + 5) % 101 // one may be short, none negative
				offs[q+1] = offs[q] + counts[q]
			}
			ins, want := exactInputs(dt, n, offs[n], int64(n*11+int(dt)))
			es := dt.Size()
			recv := make([][]byte, n)
			newJob(ts, nil).mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
				recv[r] = alignedBytes(counts[r] * es)
				return g.ReduceScatterV(ctx, ins[r], recv[r], counts, dt, reduce.ExactSum)
			})
			for r := range recv {
				checkExactBits(t, fmt.Sprintf("rank %d", r), dt, recv[r], want[offs[r]*es:offs[r+1]*es], ins, offs[r])
			}
		})
		t.Run(fmt.Sprintf("Reduce/%v", dt), func(t *testing.T) {
			count := 1031
			ins, want := exactInputs(dt, n, count, int64(n*13+int(dt)))
			root := n / 2
			recv := alignedBytes(count * dt.Size())
			send := clone(ins)
			newJob(ts, nil).mustRun(t, func(ctx context.Context, r int, g *collectives.Group) error {
				out := recv
				if r != root {
					out = nil
				}
				return g.Reduce(ctx, send[r], out, dt, reduce.ExactSum, root)
			})
			checkExactBits(t, "root", dt, recv, want, ins, 0)
			for r := range send {
				if string(send[r]) != string(ins[r]) {
					t.Fatalf("rank %d: Reduce wrote into its send buffer", r)
				}
			}
		})
	}
}
