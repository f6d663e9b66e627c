package reduce

import (
	"math"
	"strconv"
	"unsafe"
)

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type number interface {
	integer | ~float32 | ~float64
}

func alignOf[T any]() uintptr {
	var z T
	return unsafe.Alignof(z)
}

// view reinterprets b as a slice of T. b must be non-empty, aligned for T and
// a multiple of T's size long.
func view[T any](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))/unsafe.Sizeof(z))
}

// aligned reports whether b can be viewed as a slice of elements with the
// given alignment (a power of two).
func aligned(b []byte, align uintptr) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(align-1) == 0
}

// Reduce computes dst[i] = a[i] op b[i] element-wise, for elements of type dt.
//
// dst, a and b must have equal length, a multiple of dt.Size(). dst may alias
// a or b exactly (same start); no other overlap is allowed. Avg is reduced as
// Sum. The (dt, op) pair must have passed Check (Avg on integers, which
// Check rejects, is reduced as Sum as well).
//
// Reduce panics on a length mismatch or an invalid dt or op: those are
// programming errors in the caller.
func Reduce(dt DType, op Op, dst, a, b []byte) {
	if len(a) != len(dst) || len(b) != len(dst) || !dt.Valid() || !op.Valid() ||
		len(dst)&(dtypeInfo[dt].size-1) != 0 { // sizes are powers of two; a division costs more
		badReduce(dt, op, dst, a, b)
	}
	// The vector kernels use unaligned loads and stores, so they take any
	// buffer; only the scalar tail cares about alignment. A small
	// allreduce's few bytes, shorter than any kernel's block, skip the
	// table: looking through it was most of the cost of such a call.
	if len(dst) >= minBlock {
		ks := &active[dt][op]
		for i := range ks {
			k := &ks[i]
			for k.fn != nil && len(dst) >= k.block {
				nb := min(len(dst), kernelChunk) &^ (k.block - 1)
				k.fn(unsafe.SliceData(dst), unsafe.SliceData(a), unsafe.SliceData(b), nb)
				dst, a, b = dst[nb:], a[nb:], b[nb:]
			}
		}
		if len(dst) == 0 {
			return
		}
	}
	if m := dtypeInfo[dt].align - 1; m != 0 {
		p := uintptr(unsafe.Pointer(unsafe.SliceData(dst))) |
			uintptr(unsafe.Pointer(unsafe.SliceData(a))) |
			uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if p&m != 0 {
			reduceUnaligned(dt, op, dst, a, b)
			return
		}
	}
	reduceAligned(dt, op, dst, a, b)
}

// badReduce panics with what is wrong with Reduce's arguments. It is out
// of line so that Reduce, which never gets here from correct callers,
// does not pay for building the messages.
//
//go:noinline
func badReduce(dt DType, op Op, dst, a, b []byte) {
	if len(a) != len(dst) || len(b) != len(dst) {
		panic("reduce: length mismatch: dst " + strconv.Itoa(len(dst)) + ", a " + strconv.Itoa(len(a)) + ", b " + strconv.Itoa(len(b)))
	}
	if !dt.Valid() || !op.Valid() {
		panic("reduce: invalid dtype/op " + dt.String() + "/" + op.String())
	}
	panic("reduce: length " + strconv.Itoa(len(dst)) + " is not a multiple of the " + dt.String() + " size")
}

// kernelChunk bounds the bytes one assembly kernel call handles. The
// runtime cannot preempt a goroutine inside an assembly loop, so a gigabyte
// in one call would hold up a GC stop-the-world for a third of a second;
// 256 KiB takes tens of microseconds, and the extra calls cost nothing
// measurable.
const kernelChunk = 256 << 10

// scratchBytes is the chunk size of the misaligned fallback paths; it is a
// multiple of every element size.
const scratchBytes = 2048

// reduceUnaligned handles buffers that are not aligned for dt by copying
// chunks through an aligned scratch buffer. It is correct for exact aliasing
// because each chunk is read completely before its result is written.
func reduceUnaligned(dt DType, op Op, dst, a, b []byte) {
	var scratch [2 * scratchBytes / 8]uint64 // uint64 gives alignment for every dtype
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&scratch[0])), 2*scratchBytes)
	for len(dst) > 0 {
		n := min(len(dst), scratchBytes)
		ta, tb := buf[:n], buf[scratchBytes:scratchBytes+n]
		copy(ta, a[:n])
		copy(tb, b[:n])
		reduceAligned(dt, op, ta, ta, tb)
		copy(dst[:n], ta)
		dst, a, b = dst[n:], a[n:], b[n:]
	}
}

// reduceAligned dispatches on dt. Buffers are non-empty and aligned.
func reduceAligned(dt DType, op Op, dst, a, b []byte) {
	switch dt {
	case Float32:
		reduceF32(op, view[float32](dst), view[float32](a), view[float32](b))
	case Float64:
		reduceF64(op, view[float64](dst), view[float64](a), view[float64](b))
	case Int8:
		reduceInt(op, view[int8](dst), view[int8](a), view[int8](b))
	case Int16:
		reduceInt(op, view[int16](dst), view[int16](a), view[int16](b))
	case Int32:
		reduceInt(op, view[int32](dst), view[int32](a), view[int32](b))
	case Int64:
		reduceInt(op, view[int64](dst), view[int64](a), view[int64](b))
	case Uint8:
		reduceInt(op, dst, a, b)
	case Uint16:
		reduceInt(op, view[uint16](dst), view[uint16](a), view[uint16](b))
	case Uint32:
		reduceInt(op, view[uint32](dst), view[uint32](a), view[uint32](b))
	case Uint64:
		reduceInt(op, view[uint64](dst), view[uint64](a), view[uint64](b))
	case Float16:
		reduceF16(op, view[uint16](dst), view[uint16](a), view[uint16](b))
	case BFloat16:
		reduceBF16(op, view[uint16](dst), view[uint16](a), view[uint16](b))
	}
}

func reduceInt[T integer](op Op, d, a, b []T) {
	switch op {
	case Sum, Avg, ExactSum:
		sumLoop(d, a, b)
	case Prod:
		prodLoop(d, a, b)
	case Min:
		minLoop(d, a, b)
	case Max:
		maxLoop(d, a, b)
	}
}

func reduceF32(op Op, d, a, b []float32) {
	switch op {
	case Sum, Avg:
		sumF32(d, a, b)
	case Prod:
		prodLoop(d, a, b)
	case Min:
		minLoop(d, a, b)
	case Max:
		maxLoop(d, a, b)
	default:
		notReduced(op)
	}
}

func reduceF64(op Op, d, a, b []float64) {
	switch op {
	case Sum, Avg:
		sumF64(d, a, b)
	case Prod:
		prodLoop(d, a, b)
	case Min:
		minLoop(d, a, b)
	case Max:
		maxLoop(d, a, b)
	default:
		notReduced(op)
	}
}

// The generic loops below are instantiated per element type (each element
// type has its own GC shape), so the arithmetic is direct, not dictionary
// based. Reslicing a and b to len(d) lets the compiler drop bounds checks.

func sumLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

func prodLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

// minLoop and maxLoop use the builtins, which for floats propagate NaN and
// order -0 below +0.
func minLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

func maxLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

// sumF32 is the allreduce hot loop: unrolled by 8.
func sumF32(d, a, b []float32) {
	n := len(d)
	a, b = a[:n:n], b[:n:n]
	i := 0
	for ; i <= n-8; i += 8 {
		dd := (*[8]float32)(d[i : i+8])
		aa := (*[8]float32)(a[i : i+8])
		bb := (*[8]float32)(b[i : i+8])
		dd[0] = aa[0] + bb[0]
		dd[1] = aa[1] + bb[1]
		dd[2] = aa[2] + bb[2]
		dd[3] = aa[3] + bb[3]
		dd[4] = aa[4] + bb[4]
		dd[5] = aa[5] + bb[5]
		dd[6] = aa[6] + bb[6]
		dd[7] = aa[7] + bb[7]
	}
	for ; i < n; i++ {
		d[i] = a[i] + b[i]
	}
}

func sumF64(d, a, b []float64) {
	n := len(d)
	a, b = a[:n:n], b[:n:n]
	i := 0
	for ; i <= n-8; i += 8 {
		dd := (*[8]float64)(d[i : i+8])
		aa := (*[8]float64)(a[i : i+8])
		bb := (*[8]float64)(b[i : i+8])
		dd[0] = aa[0] + bb[0]
		dd[1] = aa[1] + bb[1]
		dd[2] = aa[2] + bb[2]
		dd[3] = aa[3] + bb[3]
		dd[4] = aa[4] + bb[4]
		dd[5] = aa[5] + bb[5]
		dd[6] = aa[6] + bb[6]
		dd[7] = aa[7] + bb[7]
	}
	for ; i < n; i++ {
		d[i] = a[i] + b[i]
	}
}

// Float16 and BFloat16: widen to float32, operate, round back. The
// conversion functions are small enough to be inlined here.

func reduceF16(op Op, d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = F32ToF16(F16ToF32(a[i]) + F16ToF32(b[i]))
		}
	case Prod:
		for i := range d {
			d[i] = F32ToF16(F16ToF32(a[i]) * F16ToF32(b[i]))
		}
	case Min:
		for i := range d {
			d[i] = F32ToF16(min(F16ToF32(a[i]), F16ToF32(b[i])))
		}
	case Max:
		for i := range d {
			d[i] = F32ToF16(max(F16ToF32(a[i]), F16ToF32(b[i])))
		}
	default:
		notReduced(op)
	}
}

// bf16Bits widens a bfloat16 without quieting NaNs. The loops below can use
// it because a NaN operand always yields a NaN result, and F32ToBF16 quiets
// every NaN it is given.
func bf16Bits(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func reduceBF16(op Op, d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = F32ToBF16(bf16Bits(a[i]) + bf16Bits(b[i]))
		}
	case Prod:
		for i := range d {
			d[i] = F32ToBF16(bf16Bits(a[i]) * bf16Bits(b[i]))
		}
	case Min:
		for i := range d {
			d[i] = F32ToBF16(min(bf16Bits(a[i]), bf16Bits(b[i])))
		}
	case Max:
		for i := range d {
			d[i] = F32ToBF16(max(bf16Bits(a[i]), bf16Bits(b[i])))
		}
	default:
		notReduced(op)
	}
}

// Scale divides every element of buf by n; it implements the final step of
// Avg. It only applies to float types and is a no-op for integer types (it is
// never called for them). Float16 and BFloat16 elements are widened to
// float32, divided and rounded back to nearest even. len(buf) must be a
// multiple of dt.Size() and n must be at least 1; Scale panics otherwise.
func Scale(dt DType, buf []byte, n int) {
	if n < 1 {
		panic("reduce: Scale by " + strconv.Itoa(n))
	}
	if !dt.IsFloat() || n == 1 || len(buf) == 0 {
		return
	}
	info := &dtypeInfo[dt]
	if len(buf)%info.size != 0 {
		panic("reduce: length " + strconv.Itoa(len(buf)) + " is not a multiple of the " + dt.String() + " size")
	}
	// Division by the same float32 (float64) the Go loop uses gives the
	// same correctly rounded quotients.
	for _, k := range &active[dt][opScale] {
		for k.sfn != nil && len(buf) >= k.block {
			nb := min(len(buf), kernelChunk) &^ (k.block - 1)
			k.sfn(unsafe.SliceData(buf), nb, float32(n), float64(n))
			buf = buf[nb:]
		}
	}
	if len(buf) == 0 {
		return
	}
	if !aligned(buf, info.align) {
		var scratch [scratchBytes / 8]uint64
		tmp := unsafe.Slice((*byte)(unsafe.Pointer(&scratch[0])), scratchBytes)
		for len(buf) > 0 {
			k := min(len(buf), scratchBytes)
			copy(tmp, buf[:k])
			scaleAligned(dt, tmp[:k], n)
			copy(buf[:k], tmp[:k])
			buf = buf[k:]
		}
		return
	}
	scaleAligned(dt, buf, n)
}

func scaleAligned(dt DType, buf []byte, n int) {
	switch dt {
	case Float32:
		s := view[float32](buf)
		div := float32(n)
		for i := range s {
			s[i] /= div
		}
	case Float64:
		s := view[float64](buf)
		div := float64(n)
		for i := range s {
			s[i] /= div
		}
	case Float16:
		s := view[uint16](buf)
		div := float32(n)
		for i := range s {
			s[i] = F32ToF16(F16ToF32(s[i]) / div)
		}
	case BFloat16:
		s := view[uint16](buf)
		div := float32(n)
		for i := range s {
			s[i] = F32ToBF16(BF16ToF32(s[i]) / div)
		}
	}
}

// notReduced panics for an op that Reduce does not compute on floats:
// ExactSum goes through Exact.
func notReduced(op Op) {
	panic("reduce: Reduce cannot compute " + op.String() + " on floats (use Exact)")
}
