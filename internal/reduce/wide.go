package reduce

import (
	"encoding/binary"
	"math"
	"strconv"
)

// Wide accumulation of the 16-bit types.
//
// Rounding every partial result of a Float16 or BFloat16 sum back to 16
// bits costs up to one 16-bit rounding per step: over n ranks the error
// grows as (n-1)·u·Σ|x| with u = 2^-11 or 2^-8 (a BFloat16 sum over 64
// ranks can be 25% off). The collectives therefore keep the partial
// results of Sum, Avg and Prod in float32, on the wire too, and round to
// 16 bits once, at the end. Min and Max are exact in any format and stay
// 16-bit. The kernels below are the steps such a reduction takes: a
// partial that is still one rank's input travels in 16 bits (it is exact
// there), a partial of two or more inputs in float32.
//
// Buffers named "16" hold elements of dt (Float16 or BFloat16); those
// named "32" hold float32s, twice as many bytes per element.
//
// On amd64 with AVX2 (and F16C for Float16) each step runs a generated
// assembly kernel (wideKernels, from _gen) over the longest prefix that is
// a whole number of its 8-element blocks, as Reduce does; the Go loops
// below do the rest, and everything on other CPUs, levels and
// architectures. Both compute the same bits, NaNs included except which
// of two NaN operands a sum or product keeps.
//
// The Go loops are marked go:norace, as the assembly kernels are in effect
// (the race detector does not see into assembly): they touch only the
// buffers of the call that runs them, and instrumenting every element
// slowed the -race runs of the conformance suite's 16-bit sums (go test
// -race -bench 'Wide/bfloat16/Accumulate$': 38.5 MB/s instrumented,
// 97.7 MB/s not, 2182 MB/s without -race).

// Wide reports whether op on dt accumulates in float32: Sum, Avg and Prod
// on Float16 and BFloat16.
func Wide(dt DType, op Op) bool {
	return (dt == Float16 || dt == BFloat16) && (op == Sum || op == Avg || op == Prod)
}

// Widen sets dst32[i] to src16[i] as a float32 (exact).
//
//go:norace
func Widen(dt DType, dst32, src16 []byte) {
	checkWide("Widen", dt, Sum, dst32, src16, nil)
	if i := wideSIMD(dt, wideWiden, Sum, dst32, src16, nil, len(src16)/2); i > 0 {
		dst32, src16 = dst32[4*i:], src16[2*i:]
	}
	if aligned(dst32, 4) && aligned(src16, 2) && len(src16) > 0 {
		d, s := view[float32](dst32), view[uint16](src16)
		s = s[:len(d)]
		if dt == BFloat16 {
			for i := range d {
				d[i] = BF16ToF32(s[i])
			}
		} else {
			for i := range d {
				d[i] = F16ToF32(s[i])
			}
		}
		return
	}
	for i := 0; i < len(src16)/2; i++ {
		putF32(dst32, i, widen(dt, src16, i))
	}
}

// Narrow sets dst16[i] to src32[i] rounded to dt (nearest, ties to even).
//
//go:norace
func Narrow(dt DType, dst16, src32 []byte) {
	checkWide("Narrow", dt, Sum, src32, dst16, nil)
	if i := wideSIMD(dt, wideNarrow, Sum, dst16, src32, nil, len(dst16)/2); i > 0 {
		dst16, src32 = dst16[2*i:], src32[4*i:]
	}
	if aligned(src32, 4) && aligned(dst16, 2) && len(dst16) > 0 {
		d, s := view[uint16](dst16), view[float32](src32)
		s = s[:len(d)]
		if dt == BFloat16 {
			for i := range d {
				d[i] = F32ToBF16(s[i])
			}
		} else {
			for i := range d {
				d[i] = F32ToF16(s[i])
			}
		}
		return
	}
	for i := 0; i < len(dst16)/2; i++ {
		narrow(dt, dst16, i, getF32(src32, i))
	}
}

// ReduceWide sets dst32[i] = a16[i] op b16[i], computed in float32 and
// kept there: the first step of a wide reduction, two ranks' inputs.
//
//go:norace
func ReduceWide(dt DType, op Op, dst32, a16, b16 []byte) {
	checkWide("ReduceWide", dt, op, dst32, a16, b16)
	if i := wideSIMD(dt, wideReduce, op, dst32, a16, b16, len(a16)/2); i > 0 {
		dst32, a16, b16 = dst32[4*i:], a16[2*i:], b16[2*i:]
	}
	if aligned(dst32, 4) && aligned(a16, 2) && aligned(b16, 2) && len(a16) > 0 {
		d, a, b := view[float32](dst32), view[uint16](a16), view[uint16](b16)
		a, b = a[:len(d)], b[:len(d)]
		switch {
		case dt == BFloat16 && op == Prod:
			for i := range d {
				d[i] = bf16Bits(a[i]) * bf16Bits(b[i])
			}
		case dt == BFloat16:
			for i := range d {
				d[i] = bf16Bits(a[i]) + bf16Bits(b[i])
			}
		case op == Prod:
			for i := range d {
				d[i] = F16ToF32(a[i]) * F16ToF32(b[i])
			}
		default:
			for i := range d {
				d[i] = F16ToF32(a[i]) + F16ToF32(b[i])
			}
		}
		return
	}
	for i := 0; i < len(a16)/2; i++ {
		putF32(dst32, i, apply(op, widen(dt, a16, i), widen(dt, b16, i)))
	}
}

// Accumulate sets dst32[i] = a32[i] op b16[i] in float32: a partial
// result that arrived in float32 absorbs this rank's 16-bit input. dst32
// may be a32.
//
//go:norace
func Accumulate(dt DType, op Op, dst32, a32, b16 []byte) {
	checkWide("Accumulate", dt, op, dst32, b16, a32)
	if i := wideSIMD(dt, wideAccumulate, op, dst32, a32, b16, len(b16)/2); i > 0 {
		dst32, a32, b16 = dst32[4*i:], a32[4*i:], b16[2*i:]
	}
	if aligned(dst32, 4) && aligned(a32, 4) && aligned(b16, 2) && len(b16) > 0 {
		d, a, b := view[float32](dst32), view[float32](a32), view[uint16](b16)
		a, b = a[:len(d)], b[:len(d)]
		switch {
		case dt == BFloat16 && op == Prod:
			for i := range d {
				d[i] = a[i] * bf16Bits(b[i])
			}
		case dt == BFloat16:
			for i := range d {
				d[i] = a[i] + bf16Bits(b[i])
			}
		case op == Prod:
			for i := range d {
				d[i] = a[i] * F16ToF32(b[i])
			}
		default:
			for i := range d {
				d[i] = a[i] + F16ToF32(b[i])
			}
		}
		return
	}
	for i := 0; i < len(b16)/2; i++ {
		putF32(dst32, i, apply(op, getF32(a32, i), widen(dt, b16, i)))
	}
}

// AccumulateNarrow sets dst16[i] to a32[i] op b16[i], computed in float32
// and rounded once to dt: the last step of a wide reduction. dst16 may be
// b16.
//
//go:norace
func AccumulateNarrow(dt DType, op Op, dst16, a32, b16 []byte) {
	checkWide("AccumulateNarrow", dt, op, a32, b16, nil)
	if len(dst16) != len(b16) {
		panic("reduce: AccumulateNarrow: length mismatch: dst " + strconv.Itoa(len(dst16)) + ", b " + strconv.Itoa(len(b16)))
	}
	if i := wideSIMD(dt, wideAccumulateNarrow, op, dst16, a32, b16, len(b16)/2); i > 0 {
		dst16, a32, b16 = dst16[2*i:], a32[4*i:], b16[2*i:]
	}
	if aligned(dst16, 2) && aligned(a32, 4) && aligned(b16, 2) && len(b16) > 0 {
		d, a, b := view[uint16](dst16), view[float32](a32), view[uint16](b16)
		a, b = a[:len(d)], b[:len(d)]
		switch {
		case dt == BFloat16 && op == Prod:
			for i := range d {
				d[i] = F32ToBF16(a[i] * bf16Bits(b[i]))
			}
		case dt == BFloat16:
			for i := range d {
				d[i] = F32ToBF16(a[i] + bf16Bits(b[i]))
			}
		case op == Prod:
			for i := range d {
				d[i] = F32ToF16(a[i] * F16ToF32(b[i]))
			}
		default:
			for i := range d {
				d[i] = F32ToF16(a[i] + F16ToF32(b[i]))
			}
		}
		return
	}
	for i := 0; i < len(b16)/2; i++ {
		narrow(dt, dst16, i, apply(op, getF32(a32, i), widen(dt, b16, i)))
	}
}

// wideSIMD runs the vector kernel of step kind for dt and op at the
// active level, if there is one, over the first n elements rounded down
// to its block (d, a and b are the kernel's operands, b nil for Widen and
// Narrow), and returns how many elements it did; the caller's Go loop
// does the rest. Like Reduce, it calls the kernel on at most kernelChunk
// bytes (of the float32 side) at a time, so that the goroutine can be
// preempted between calls.
//
//go:norace
func wideSIMD(dt DType, kind wideKind, op Op, d, a, b []byte, n int) int {
	k := &activeWide[dt][kind][wideOpIndex(op)]
	if k.fn == nil || n < k.block {
		return 0
	}
	done := n &^ (k.block - 1)
	wd, wa := wideWidths[kind][0], wideWidths[kind][1]
	// Slicing first panics, as the Go loops would, rather than letting the
	// kernel run off a buffer too short for its width.
	d, a = d[:wd*done], a[:wa*done]
	if b != nil {
		b = b[:2*done]
	}
	for i := 0; i < done; {
		m := min(done-i, kernelChunk/4)
		var pb *byte
		if b != nil {
			pb = &b[2*i]
		}
		k.fn(&d[wd*i], &a[wa*i], pb, m)
		i += m
	}
	return done
}

// wideWidths holds the bytes per element of each step's d and a operands
// (b, when there is one, is always 16-bit).
var wideWidths = [numWideKinds][2]int{
	wideWiden:            {4, 2},
	wideNarrow:           {2, 4},
	wideReduce:           {4, 2},
	wideAccumulate:       {4, 4},
	wideAccumulateNarrow: {2, 4},
}

// checkWide panics unless dt is a 16-bit type, op one that accumulates
// wide, len(w) = 2·len(h) and x (if not nil) as long as w or h.
func checkWide(what string, dt DType, op Op, w, h, x []byte) {
	if !Wide(dt, op) {
		panic("reduce: " + what + ": " + dt.String() + "/" + op.String() + " does not accumulate in float32")
	}
	if len(h)%2 != 0 || len(w) != 2*len(h) || x != nil && len(x) != len(w) && len(x) != len(h) {
		panic("reduce: " + what + ": length mismatch: " + strconv.Itoa(len(w)) + " float32 bytes for " + strconv.Itoa(len(h)) + " 16-bit bytes")
	}
}

// The fallback for misaligned buffers, element by element through
// encoding/binary (no unaligned typed loads; see the package doc).

func widen(dt DType, b []byte, i int) float32 {
	h := binary.LittleEndian.Uint16(b[2*i:])
	if dt == BFloat16 {
		return BF16ToF32(h)
	}
	return F16ToF32(h)
}

func narrow(dt DType, b []byte, i int, f float32) {
	if dt == BFloat16 {
		binary.LittleEndian.PutUint16(b[2*i:], F32ToBF16(f))
	} else {
		binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(f))
	}
}

func getF32(b []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

func putF32(b []byte, i int, f float32) {
	binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
}

func apply(op Op, a, b float32) float32 {
	if op == Prod {
		return a * b
	}
	return a + b
}
