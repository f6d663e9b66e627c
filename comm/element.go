package comm

import (
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
)

// Float16 is an IEEE 754 half-precision number, stored in its 16 bits.
//
// Sum, Avg and Prod of Float16 (and BFloat16) keep every partial result
// in float32, on the wire too, and round to the 16-bit type once, at the
// end (to nearest, ties to even; Avg divides in float32 first). A sum is
// then within one 16-bit rounding of the exact sum plus float32's own
// accumulation error: |error| ≤ u·|S| + (n-1)·2⁻²⁴·Σ|xᵢ| to first order,
// with u = 2⁻¹¹ (Float16) or 2⁻⁸ (BFloat16), which at 16-bit precision
// does not grow with the number of ranks n. Min and Max are exact. Every
// rank ends with the same bits.
type Float16 uint16

// Float32 converts h to float32 exactly.
func (h Float16) Float32() float32 { return reduce.F16ToF32(uint16(h)) }

// Float16Of rounds f to the nearest Float16 (ties to even).
func Float16Of(f float32) Float16 { return Float16(reduce.F32ToF16(f)) }

// BFloat16 is a bfloat16 number (the top half of a float32), stored in its
// 16 bits. Reductions accumulate in float32 and round once, as Float16's
// do (see there).
type BFloat16 uint16

// Float32 converts b to float32 exactly.
func (b BFloat16) Float32() float32 { return reduce.BF16ToF32(uint16(b)) }

// BFloat16Of rounds f to the nearest BFloat16 (ties to even).
func BFloat16Of(f float32) BFloat16 { return BFloat16(reduce.F32ToBF16(f)) }

// Element lists the types the collectives carry. The types are exact
// (no ~): a program with its own named float type converts its slice.
// int and uint travel as int64 and uint64 (int32 and uint32 on a 32-bit
// platform, whose ranks must not share a job with 64-bit ones).
type Element interface {
	float32 | float64 | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | Float16 | BFloat16 | int | uint
}

// Op is a reduction operation.
type Op uint8

const (
	// Sum adds. Integers wrap around on overflow, as Go's + does.
	Sum = Op(reduce.Sum)
	// Prod multiplies. Integers wrap around on overflow.
	Prod = Op(reduce.Prod)
	// Min keeps the smallest; for floats, NaN if any input is NaN, and -0 < +0.
	Min = Op(reduce.Min)
	// Max keeps the largest; for floats, NaN if any input is NaN, and -0 < +0.
	Max = Op(reduce.Max)
	// Avg is Sum divided by the number of ranks, for floating-point types
	// only; on integers it returns ErrUnsupported (use Sum and divide, with
	// the rounding your program wants). Avg weighs every rank alike: the
	// Avg of per-rank means is the mean over all samples only when every
	// rank holds as many samples. After Shrink leaves 2048 samples on 3
	// ranks (683, 683, 682), or with any uneven shards, use AllReduceMean
	// with each rank's sample count as its weight.
	Avg = Op(reduce.Avg)
	// ExactSum is the correctly rounded sum: for Float16, BFloat16,
	// float32 and float64, each result element is the exact sum of every
	// rank's input rounded once, to nearest with ties to even. Being a
	// function of the inputs alone, it is the same bits whatever the
	// number of ranks, the algorithm, the transport or the order in which
	// messages arrive, and as accurate as the type allows. Overflow gives
	// ±Inf as one IEEE addition of the exact sum would; any NaN input,
	// or +Inf and -Inf together, give the canonical quiet NaN (positive,
	// no payload: 0x7fc00000 for float32, 0x7ff8000000000000 for float64,
	// 0x7e00 for Float16, 0x7fc0 for BFloat16), whatever the inputs'
	// payloads; an exact zero sum is -0 only when every input is -0.
	//
	// Cost: one algorithm runs it, a pairwise reduce-scatter (each rank
	// sends block q of its input, in the type's own width, to rank q,
	// which sums the n inputs of its block exactly) and a direct
	// allgather of the rounded blocks, so the wire carries what Sum's
	// ring does, in two steps of n-1 concurrent messages. The extra is
	// the arithmetic, the owner reading its peers' blocks in place: per element, a
	// float64 sum with a check that the inputs' exponents span few enough
	// bits for it to be exact (AVX2 for float32), error-free TwoSum
	// additions where they span more, and math/big (about a microsecond)
	// for the rare element whose inputs lie at three or more far-apart
	// scales. GOCOLL_ALGO does not change it (see package collectives).
	// On integer types ExactSum is Sum. docs/exactsum.md has measurements.
	ExactSum = Op(reduce.ExactSum)
)

func (o Op) String() string { return reduce.Op(o).String() }

func dtypeOf[T Element]() reduce.DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return reduce.Float32
	case float64:
		return reduce.Float64
	case int8:
		return reduce.Int8
	case int16:
		return reduce.Int16
	case int32:
		return reduce.Int32
	case int64:
		return reduce.Int64
	case uint8:
		return reduce.Uint8
	case uint16:
		return reduce.Uint16
	case uint32:
		return reduce.Uint32
	case uint64:
		return reduce.Uint64
	case Float16:
		return reduce.Float16
	case BFloat16:
		return reduce.BFloat16
	case int:
		if unsafe.Sizeof(zero) == 8 {
			return reduce.Int64
		}
		return reduce.Int32
	case uint:
		if unsafe.Sizeof(zero) == 8 {
			return reduce.Uint64
		}
		return reduce.Uint32
	}
	panic("unreachable: Element lists every type")
}

// bytesOf is s's memory as bytes, without copying.
func bytesOf[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}
