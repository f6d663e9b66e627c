package conformance

import (
	"encoding/binary"
	"math"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/internal/testmode"
)

// The suite's inputs are small integers (and, for products, a few powers
// of two), exactly representable in every element type, bfloat16 included,
// with every partial result exact too (in float32, for the 16-bit types).
// So any reduction order gives the same bits, and results are compared
// with the serial reference exactly: one misrouted or doubly-reduced chunk
// shows. Rounding behaviour is tested separately, with random inputs and a
// tolerance (see randomFloats).
//
// The 16-bit types' sums (and averages) mix in a large power of two, next
// to which the small integers are below 16-bit precision: their partial
// sums are exact in float32 but not in 16 bits. The library accumulates
// them in float32 and rounds once (reduce.Wide), so the reference is the
// exact result rounded once; a path that rounded a partial result to 16
// bits on the way would differ from it.

var allTypes = []reduce.DType{
	reduce.Float32, reduce.Float64, reduce.Int8, reduce.Int16, reduce.Int32, reduce.Int64,
	reduce.Uint8, reduce.Uint16, reduce.Uint32, reduce.Uint64, reduce.Float16, reduce.BFloat16,
}

var allOps = []reduce.Op{reduce.Sum, reduce.Prod, reduce.Min, reduce.Max, reduce.Avg, reduce.ExactSum}

// transportTypes are the types a transport-only run tries (see
// testmode.Sampled): each element size, the 16-bit float whose
// partials are wider on the wire, and the types heavy and copyHeavy
// pick for the multi-message sizes.
var transportTypes = []reduce.DType{
	reduce.Uint8, reduce.Int8, reduce.Int16, reduce.Float16, reduce.Float32, reduce.Float64,
}

// suiteTypes are the element types the suite tries.
func suiteTypes() []reduce.DType {
	if testmode.Sampled() {
		return transportTypes
	}
	return allTypes
}

// suiteOps are the ops the suite tries on dt: all of them, or in a
// transport-only run every op on float32 and sums on the rest.
func suiteOps(dt reduce.DType) []reduce.Op {
	if testmode.Sampled() && dt != reduce.Float32 {
		return []reduce.Op{reduce.Sum}
	}
	return allOps
}

// input is rank q's i-th element for op, as a float64.
func input(op reduce.Op, dt reduce.DType, q, i int) float64 {
	h := (q*7919 + i*104729 + int(op)*31) % 997
	if op == reduce.Prod {
		// Products of up to 8 of these stay within every type's range
		// (or wrap, for integers, the same way in the reference).
		vals := []float64{1, 2, 1, 1, 3, 1, 1, 2}
		if dt.IsFloat() {
			vals = []float64{1, 2, -1, 0.5, 1, -2, 1, 0.25}
		}
		return vals[h%len(vals)]
	}
	if reduce.Wide(dt, op) && h%4 == 0 {
		// 2^11 (binary16: spacing 2, then 4...) or 2^8 (bfloat16: spacing
		// 2, then 4...), either sign: the small integers beside it round.
		big := 2048.0
		if dt == reduce.BFloat16 {
			big = 256
		}
		if h%8 == 0 {
			return -big
		}
		return big
	}
	if !signed(dt) {
		return float64(h % 9)
	}
	return float64(h%17 - 8)
}

func signed(dt reduce.DType) bool {
	switch dt {
	case reduce.Uint8, reduce.Uint16, reduce.Uint32, reduce.Uint64:
		return false
	}
	return true
}

// reference reduces the inputs of n ranks serially, in rank order, with
// plain float64 or int64 arithmetic (exact for the suite's inputs), then
// converts to dt's semantics (wrapping for integers; put rounds a 16-bit
// float once).
func reference(op reduce.Op, dt reduce.DType, n, i int) float64 {
	acc := input(op, dt, 0, i)
	if !dt.IsFloat() {
		a := int64(acc)
		for q := 1; q < n; q++ {
			x := int64(input(op, dt, q, i))
			switch op {
			case reduce.Sum, reduce.ExactSum:
				a += x
			case reduce.Prod:
				a *= x
			case reduce.Min:
				a = min(a, x)
			case reduce.Max:
				a = max(a, x)
			}
		}
		return wrap(dt, a)
	}
	for q := 1; q < n; q++ {
		x := input(op, dt, q, i)
		switch op {
		case reduce.Sum, reduce.Avg, reduce.ExactSum:
			acc += x
		case reduce.Prod:
			acc *= x
		case reduce.Min:
			acc = min(acc, x)
		case reduce.Max:
			acc = max(acc, x)
		}
	}
	if op == reduce.Avg {
		// The library divides once, in the element's own precision
		// (float32 for the 16-bit types).
		if dt == reduce.Float64 {
			acc /= float64(n)
		} else {
			acc = float64(float32(acc) / float32(n))
		}
	}
	return acc
}

func wrap(dt reduce.DType, a int64) float64 {
	switch dt {
	case reduce.Int8:
		return float64(int8(a))
	case reduce.Int16:
		return float64(int16(a))
	case reduce.Int32:
		return float64(int32(a))
	case reduce.Uint8:
		return float64(uint8(a))
	case reduce.Uint16:
		return float64(uint16(a))
	case reduce.Uint32:
		return float64(uint32(a))
	case reduce.Uint64:
		return float64(uint64(a))
	}
	return float64(a)
}

// put stores v as element i of b, in dt's encoding (rounding to nearest
// for the 16-bit floats, wrapping for integers).
func put(dt reduce.DType, b []byte, i int, v float64) {
	es := dt.Size()
	e := b[i*es : (i+1)*es]
	switch dt {
	case reduce.Float32:
		binary.LittleEndian.PutUint32(e, math.Float32bits(float32(v)))
	case reduce.Float64:
		binary.LittleEndian.PutUint64(e, math.Float64bits(v))
	case reduce.Float16:
		binary.LittleEndian.PutUint16(e, reduce.F32ToF16(float32(v)))
	case reduce.BFloat16:
		binary.LittleEndian.PutUint16(e, reduce.F32ToBF16(float32(v)))
	case reduce.Int8, reduce.Uint8:
		e[0] = byte(int64(v))
	case reduce.Int16, reduce.Uint16:
		binary.LittleEndian.PutUint16(e, uint16(int64(v)))
	case reduce.Int32, reduce.Uint32:
		binary.LittleEndian.PutUint32(e, uint32(int64(v)))
	case reduce.Int64:
		binary.LittleEndian.PutUint64(e, uint64(int64(v)))
	case reduce.Uint64:
		binary.LittleEndian.PutUint64(e, uint64(v))
	}
}

// get reads element i of b as a float64.
func get(dt reduce.DType, b []byte, i int) float64 {
	es := dt.Size()
	e := b[i*es : (i+1)*es]
	switch dt {
	case reduce.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
	case reduce.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(e))
	case reduce.Float16:
		return float64(reduce.F16ToF32(binary.LittleEndian.Uint16(e)))
	case reduce.BFloat16:
		return float64(reduce.BF16ToF32(binary.LittleEndian.Uint16(e)))
	case reduce.Int8:
		return float64(int8(e[0]))
	case reduce.Uint8:
		return float64(e[0])
	case reduce.Int16:
		return float64(int16(binary.LittleEndian.Uint16(e)))
	case reduce.Uint16:
		return float64(binary.LittleEndian.Uint16(e))
	case reduce.Int32:
		return float64(int32(binary.LittleEndian.Uint32(e)))
	case reduce.Uint32:
		return float64(binary.LittleEndian.Uint32(e))
	case reduce.Int64:
		return float64(int64(binary.LittleEndian.Uint64(e)))
	case reduce.Uint64:
		return float64(binary.LittleEndian.Uint64(e))
	}
	return math.NaN()
}

// fill makes rank q's input buffer of count elements.
func fill(op reduce.Op, dt reduce.DType, q, count int) []byte {
	b := alignedBytes(count * dt.Size())
	for i := 0; i < count; i++ {
		put(dt, b, i, input(op, dt, q, i))
	}
	return b
}

// alignedBytes allocates n bytes aligned for any element type (the
// collectives reinterpret them as typed slices).
func alignedBytes(n int) []byte {
	w := make([]uint64, (n+7)/8)
	if len(w) == 0 {
		return []byte{}
	}
	return unsafeBytes(w)[:n]
}
