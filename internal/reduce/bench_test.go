package reduce

import (
	"math"
	"math/rand"
	"testing"
	"time"
	"unsafe"
)

// Throughput convention: b.SetBytes counts all bytes moved per call, i.e.
// 3x the buffer size (read a, read b, write dst), so MB/s is memory traffic,
// not output size. Divide by 3 for "output bytes per second".

var benchSizes = []struct {
	name  string
	bytes int
}{
	{"8B", 8}, // a small allreduce's whole reduction: the cost is the dispatch
	{"16KiB", 16 << 10},
	{"64KiB", 64 << 10},
	{"64MiB", 64 << 20},
}

func benchBuffers(n int) (dst, a, b []byte) {
	a, b, dst = make([]byte, n), make([]byte, n), make([]byte, n)
	fa, fb := view[float32](a), view[float32](b)
	for i := range fa {
		fa[i] = float32(i%1000) * 0.25
		fb[i] = float32(i%777) * 0.5
	}
	return dst, a, b
}

// benchValues returns size bytes of ordinary values of type dt: floats
// uniformly in [-4, 4) (no NaN, Inf or subnormals), random integers.
func benchValues(dt DType, size int, seed int64) []byte {
	rng := rand.New(rand.NewSource(seed))
	buf := make([]byte, size)
	for i := 0; i < size/dt.Size(); i++ {
		x := rng.Float64()*8 - 4
		var u uint64
		switch dt {
		case Float32:
			u = uint64(math.Float32bits(float32(x)))
		case Float64:
			u = math.Float64bits(x)
		case Float16:
			u = uint64(F32ToF16(float32(x)))
		case BFloat16:
			u = uint64(F32ToBF16(float32(x)))
		default:
			u = rng.Uint64()
		}
		putUint(dt, buf, i, u)
	}
	return buf
}

func BenchmarkReduceFloat32Sum(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			dst, x, y := benchBuffers(sz.bytes)
			b.SetBytes(3 * int64(sz.bytes))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Reduce(Float32, Sum, dst, x, y)
			}
		})
	}
}

// naiveSumF32 is the loop one would write without thinking about bounds
// checks or unrolling; the baseline for BenchmarkReduceFloat32Sum.
//
//go:noinline
func naiveSumF32(d, a, b []float32) {
	for i := 0; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

func BenchmarkNaiveFloat32Sum(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			dst, x, y := benchBuffers(sz.bytes)
			d, fx, fy := view[float32](dst), view[float32](x), view[float32](y)
			b.SetBytes(3 * int64(sz.bytes))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				naiveSumF32(d, fx, fy)
			}
		})
	}
}

// BenchmarkReduce covers every dtype with a few ops at 64 KiB (in cache).
func BenchmarkReduce(b *testing.B) {
	const size = 64 << 10
	for _, dt := range allDTypes {
		for _, op := range []Op{Sum, Prod, Max} {
			b.Run(dt.String()+"/"+op.String(), func(b *testing.B) {
				dst, x, y := make([]byte, size), benchValues(dt, size, 1), benchValues(dt, size, 2)
				b.SetBytes(3 * size)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					Reduce(dt, op, dst, x, y)
				}
			})
		}
	}
}

func BenchmarkReduceMisaligned(b *testing.B) {
	const size = 64 << 10
	dst, x, y := benchBuffers(size + 8)
	dst, x, y = dst[4:size+4], x[4:size+4], y[1:size+1]
	if uintptr(unsafe.Pointer(&y[0]))%4 == 0 {
		b.Fatal("expected a misaligned buffer")
	}
	b.SetBytes(3 * size)
	for i := 0; i < b.N; i++ {
		Reduce(Float32, Sum, dst, x, y)
	}
}

func BenchmarkScale(b *testing.B) {
	const size = 64 << 10
	for _, dt := range []DType{Float32, Float64, Float16, BFloat16} {
		b.Run(dt.String(), func(b *testing.B) {
			// Each iteration restores the input first, so that repeated
			// division does not drift into subnormals; the copy is timed too.
			buf, orig := make([]byte, size), benchValues(dt, size, 1)
			b.SetBytes(2 * size) // read and write
			for i := 0; i < b.N; i++ {
				copy(buf, orig)
				Scale(dt, buf, 3)
			}
		})
	}
}

// BenchmarkFloat32SumLevel is out = a + b at each kernel level the CPU has,
// next to the plain Go loop, for the side-by-side comparison with the C
// a+b loop of run-mpi.sh membw, whose "moved" figure counts the same 3x
// bytes as MB/s here. membw reports the best of 10 passes, so the 64 MiB
// runs also report best-GB/s: the fastest single pass, in those units.
func BenchmarkFloat32SumLevel(b *testing.B) {
	for _, sz := range []struct {
		name  string
		bytes int
	}{{"16KiB", 16 << 10}, {"64MiB", 64 << 20}} {
		dst, x, y := benchBuffers(sz.bytes)
		run := func(b *testing.B, f func()) {
			b.SetBytes(3 * int64(sz.bytes))
			if sz.bytes < 1<<20 {
				for i := 0; i < b.N; i++ {
					f()
				}
				return
			}
			best := time.Duration(math.MaxInt64)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				f()
				best = min(best, time.Since(t0))
			}
			b.ReportMetric(3*float64(sz.bytes)/best.Seconds()/1e9, "best-GB/s")
		}
		b.Run("impl=naive/size="+sz.name, func(b *testing.B) {
			d, fx, fy := view[float32](dst), view[float32](x), view[float32](y)
			run(b, func() { naiveSumF32(d, fx, fy) })
		})
		for _, l := range levels() {
			b.Run("impl="+l.String()+"/size="+sz.name, func(b *testing.B) {
				old := activeLevel
				setLevel(l)
				defer setLevel(old)
				run(b, func() { Reduce(Float32, Sum, dst, x, y) })
			})
		}
	}
}

// BenchmarkWide: the float32-partials kernels (wide.go) beside the 16-bit
// Sum kernel they replace from three ranks on. MB/s counts the 16-bit
// elements' bytes of one input, so the figures compare per element.
func BenchmarkWide(b *testing.B) {
	const n = 256 << 10 // elements: 512 KiB of 16-bit input
	for _, dt := range []DType{Float16, BFloat16} {
		h1, h2 := benchValues(dt, 2*n, 1), benchValues(dt, 2*n, 2)
		out16 := make([]byte, 2*n)
		w1, w2 := make([]byte, 4*n), make([]byte, 4*n)
		Widen(dt, w1, h1)
		for _, k := range []struct {
			name string
			f    func()
		}{
			{"Reduce16", func() { Reduce(dt, Sum, out16, h1, h2) }},
			{"ReduceWide", func() { ReduceWide(dt, Sum, w2, h1, h2) }},
			{"Accumulate", func() { Accumulate(dt, Sum, w2, w1, h2) }},
			{"AccumulateNarrow", func() { AccumulateNarrow(dt, Sum, out16, w1, h2) }},
			{"Widen", func() { Widen(dt, w2, h1) }},
			{"Narrow", func() { Narrow(dt, out16, w1) }},
		} {
			b.Run(dt.String()+"/"+k.name, func(b *testing.B) {
				b.SetBytes(2 * n)
				for range b.N {
					k.f()
				}
			})
		}
	}
}
