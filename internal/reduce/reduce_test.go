package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// The reference implementation decodes every element with encoding/binary
// (native byte order, as the kernels reinterpret memory in place), computes
// in a wide type, and encodes the result back.

var ne = binary.NativeEndian

func getUint(dt DType, b []byte, i int) uint64 {
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(ne.Uint16(b[2*i:]))
	case 4:
		return uint64(ne.Uint32(b[4*i:]))
	default:
		return ne.Uint64(b[8*i:])
	}
}

// putUint stores the low dt.Size() bytes of v: truncation gives two's
// complement wrap-around for the integer types.
func putUint(dt DType, b []byte, i int, v uint64) {
	switch dt.Size() {
	case 1:
		b[i] = byte(v)
	case 2:
		ne.PutUint16(b[2*i:], uint16(v))
	case 4:
		ne.PutUint32(b[4*i:], uint32(v))
	default:
		ne.PutUint64(b[8*i:], v)
	}
}

func isSigned(dt DType) bool {
	return dt == Int8 || dt == Int16 || dt == Int32 || dt == Int64
}

// signExtend interprets the low dt.Size() bytes of v as a signed integer.
func signExtend(dt DType, v uint64) int64 {
	shift := 64 - 8*dt.Size()
	return int64(v<<shift) >> shift
}

// refMinMax implements min/max from their definition: NaN if either operand
// is NaN, -0 < +0, otherwise ordinary ordering.
func refMinMax(op Op, x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	if x == 0 && y == 0 {
		negX, negY := math.Signbit(x), math.Signbit(y)
		if op == Min {
			if negX || negY {
				return math.Copysign(0, -1)
			}
			return 0
		}
		if negX && negY {
			return math.Copysign(0, -1)
		}
		return 0
	}
	if (op == Min) == (x < y) {
		return x
	}
	return y
}

func refElem(dt DType, op Op, a, b []byte, i int, out []byte) {
	if op == Avg {
		op = Sum
	}
	ua, ub := getUint(dt, a, i), getUint(dt, b, i)
	switch {
	case isSigned(dt):
		x, y := signExtend(dt, ua), signExtend(dt, ub)
		var r int64
		switch op {
		case Sum:
			r = x + y
		case Prod:
			r = x * y
		case Min:
			r = x
			if y < x {
				r = y
			}
		case Max:
			r = x
			if y > x {
				r = y
			}
		}
		putUint(dt, out, i, uint64(r))
	case !dt.IsFloat(): // unsigned
		x, y := ua, ub
		var r uint64
		switch op {
		case Sum:
			r = x + y
		case Prod:
			r = x * y
		case Min:
			r = x
			if y < x {
				r = y
			}
		case Max:
			r = x
			if y > x {
				r = y
			}
		}
		putUint(dt, out, i, r)
	case dt == Float64:
		x, y := math.Float64frombits(ua), math.Float64frombits(ub)
		var r float64
		switch op {
		case Sum:
			r = x + y
		case Prod:
			r = x * y
		default:
			r = refMinMax(op, x, y)
		}
		putUint(dt, out, i, math.Float64bits(r))
	default: // float32 and the 16-bit formats: compute in float32
		var x, y float32
		var f halfFormat
		switch dt {
		case Float32:
			x, y = math.Float32frombits(uint32(ua)), math.Float32frombits(uint32(ub))
		case Float16, BFloat16:
			f = fmtF16
			if dt == BFloat16 {
				f = fmtBF16
			}
			x, y = float32(f.decode(uint16(ua))), float32(f.decode(uint16(ub)))
		}
		var r float32
		switch op {
		case Sum:
			r = x + y
		case Prod:
			r = x * y
		default:
			r = float32(refMinMax(op, float64(x), float64(y)))
		}
		switch {
		case dt == Float32:
			putUint(dt, out, i, uint64(math.Float32bits(r)))
		case math.IsNaN(float64(r)):
			putUint(dt, out, i, uint64(f.expAll()|1)) // any NaN
		default:
			putUint(dt, out, i, uint64(f.encode(float64(r))))
		}
	}
}

func refReduce(dt DType, op Op, a, b []byte) []byte {
	out := make([]byte, len(a))
	for i := 0; i < len(a)/dt.Size(); i++ {
		refElem(dt, op, a, b, i, out)
	}
	return out
}

// elemIsNaN reports whether element i of buf is a NaN.
func elemIsNaN(dt DType, buf []byte, i int) bool {
	u := getUint(dt, buf, i)
	switch dt {
	case Float32:
		return math.IsNaN(float64(math.Float32frombits(uint32(u))))
	case Float64:
		return math.IsNaN(math.Float64frombits(u))
	case Float16:
		return fmtF16.isNaN(uint16(u))
	case BFloat16:
		return fmtBF16.isNaN(uint16(u))
	}
	return false
}

// firstSignalingNaN returns the index of the first NaN without the quiet bit
// in a float16 or bfloat16 buffer, or -1. (The 16-bit results always go
// through F32ToF16/F32ToBF16, which produce quiet NaNs.)
func firstSignalingNaN(dt DType, buf []byte) int {
	var quiet uint16
	switch dt {
	case Float16:
		quiet = f16QuietBit
	case BFloat16:
		quiet = 0x0040
	default:
		return -1
	}
	for i := 0; i < len(buf)/2; i++ {
		if elemIsNaN(dt, buf, i) && uint16(getUint(dt, buf, i))&quiet == 0 {
			return i
		}
	}
	return -1
}

// compareElems returns the index of the first element where got and want
// differ (bit-exactly, except that any NaN matches any NaN), or -1.
func compareElems(dt DType, got, want []byte) int {
	for i := 0; i < len(want)/dt.Size(); i++ {
		if getUint(dt, got, i) == getUint(dt, want, i) {
			continue
		}
		if dt.IsFloat() && elemIsNaN(dt, got, i) && elemIsNaN(dt, want, i) {
			continue
		}
		return i
	}
	return -1
}

func fmtElem(dt DType, buf []byte, i int) string {
	u := getUint(dt, buf, i)
	switch dt {
	case Float32:
		return fmt.Sprintf("%v (%#08x)", math.Float32frombits(uint32(u)), u)
	case Float64:
		return fmt.Sprintf("%v (%#016x)", math.Float64frombits(u), u)
	case Float16:
		return fmt.Sprintf("%v (%#04x)", fmtF16.decode(uint16(u)), u)
	case BFloat16:
		return fmt.Sprintf("%v (%#04x)", fmtBF16.decode(uint16(u)), u)
	}
	if isSigned(dt) {
		return fmt.Sprint(signExtend(dt, u))
	}
	return fmt.Sprint(u)
}

// Interesting bit patterns per float type.
var (
	specialF32 = []uint32{
		0x00000000, 0x80000000, // ±0
		0x7f800000, 0xff800000, // ±Inf
		0x7fc00000, 0xffc00001, // NaNs
		0x00000001, 0x80000001, // ±smallest subnormal
		0x007fffff, 0x00400000, // largest / a middle subnormal
		0x00800000, 0x80800000, // ±smallest normal
		0x7f7fffff, 0xff7fffff, // ±max
		0x3f800000, 0xbf800000, // ±1
		0x3f000000, 0x4b800000, // 0.5, 2^24
	}
	specialF64 = []uint64{
		0x0000000000000000, 0x8000000000000000,
		0x7ff0000000000000, 0xfff0000000000000,
		0x7ff8000000000000, 0xfff8000000000001,
		0x0000000000000001, 0x8000000000000001,
		0x000fffffffffffff, 0x0008000000000000,
		0x0010000000000000, 0x8010000000000000,
		0x7fefffffffffffff, 0xffefffffffffffff,
		0x3ff0000000000000, 0xbff0000000000000,
		0x3fe0000000000000, 0x4340000000000000,
	}
	specialF16 = []uint16{
		0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfd01, 0x0001, 0x8001, 0x03ff, 0x0200,
		0x0400, 0x8400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x7800, 0x0002,
	}
	specialBF16 = []uint16{
		0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0001, 0x8001, 0x007f, 0x0040,
		0x0080, 0x8080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x7f00, 0x0002,
	}
)

// genValues returns n random elements of type dt: a mix of special values
// (for floats: NaN, ±Inf, ±0, subnormals, extremes; for integers: extremes),
// moderate values that give meaningful sums and products, and arbitrary bit
// patterns.
func genValues(rng *rand.Rand, dt DType, n int) []byte {
	buf := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		kind := rng.Intn(8)
		var u uint64
		switch dt {
		case Float32:
			switch {
			case kind < 2:
				u = uint64(specialF32[rng.Intn(len(specialF32))])
			case kind < 6:
				u = uint64(math.Float32bits(float32(math.Ldexp(rng.Float64()*2-1, rng.Intn(40)-20))))
			default:
				u = uint64(rng.Uint32())
			}
		case Float64:
			switch {
			case kind < 2:
				u = specialF64[rng.Intn(len(specialF64))]
			case kind < 6:
				u = math.Float64bits(math.Ldexp(rng.Float64()*2-1, rng.Intn(80)-40))
			default:
				u = rng.Uint64()
			}
		case Float16, BFloat16:
			specials, f := specialF16, fmtF16
			if dt == BFloat16 {
				specials, f = specialBF16, fmtBF16
			}
			switch {
			case kind < 2:
				u = uint64(specials[rng.Intn(len(specials))])
			case kind < 6:
				u = uint64(f.encode(math.Ldexp(rng.Float64()*2-1, rng.Intn(16)-8)))
			default:
				u = uint64(rng.Intn(1 << 16))
			}
		default: // integers
			bits := 8 * dt.Size()
			switch {
			case kind < 2:
				// 0, ±1, min, max, and their neighbours.
				ext := []uint64{0, 1, ^uint64(0), 1<<(bits-1) - 1, 1 << (bits - 1), 1<<(bits-1) + 1, 2}
				u = ext[rng.Intn(len(ext))]
			case kind < 5:
				u = uint64(rng.Intn(201)) - 100 // small, may be negative
			default:
				u = rng.Uint64()
			}
		}
		putUint(dt, buf, i, u)
	}
	return buf
}

// guarded returns a zeroed n-byte slice inside a larger allocation whose
// surrounding bytes are set to a pattern, and a function that reports whether
// the pattern is intact. The slice start is 16-byte aligned.
func guarded(n int) ([]byte, func() bool) {
	const pad = 64
	backing := make([]byte, n+2*pad)
	for i := range backing {
		backing[i] = 0xa5
	}
	s := backing[pad : pad+n : pad+n]
	for i := range s {
		s[i] = 0
	}
	return s, func() bool {
		for _, c := range backing[:pad] {
			if c != 0xa5 {
				return false
			}
		}
		for _, c := range backing[pad+n:] {
			if c != 0xa5 {
				return false
			}
		}
		return true
	}
}

func testLengths(rng *rand.Rand) []int {
	var ls []int
	for n := 0; n <= 130; n++ {
		ls = append(ls, n)
	}
	ls = append(ls, 255, 256, 257, 1000+rng.Intn(1000), 4096+rng.Intn(64), 10000+rng.Intn(10000))
	return ls
}

func TestReduceAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	lengths := testLengths(rng)
	for _, dt := range allDTypes {
		for _, op := range allOps {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				for _, n := range lengths {
					a := genValues(rng, dt, n)
					b := genValues(rng, dt, n)
					a0, b0 := bytes.Clone(a), bytes.Clone(b)
					want := refReduce(dt, op, a, b)
					dst, intact := guarded(len(a))
					Reduce(dt, op, dst, a, b)
					if i := compareElems(dt, dst, want); i >= 0 {
						t.Fatalf("n=%d: element %d: %s %s %s = %s, want %s", n, i,
							fmtElem(dt, a, i), op, fmtElem(dt, b, i), fmtElem(dt, dst, i), fmtElem(dt, want, i))
					}
					if !intact() {
						t.Fatalf("n=%d: wrote outside dst", n)
					}
					if i := firstSignalingNaN(dt, dst); i >= 0 {
						t.Fatalf("n=%d: element %d is a signaling NaN %s", n, i, fmtElem(dt, dst, i))
					}
					if !bytes.Equal(a, a0) || !bytes.Equal(b, b0) {
						t.Fatalf("n=%d: inputs modified", n)
					}
				}
			})
		}
	}
}

// TestReduceKnownValues spells out the semantics on a few hand-picked cases.
func TestReduceKnownValues(t *testing.T) {
	negZero32 := float32(math.Copysign(0, -1))
	nan32 := float32(math.NaN())
	inf32 := float32(math.Inf(1))
	negZero64 := math.Copysign(0, -1)
	tests := []struct {
		name string
		dt   DType
		op   Op
		a, b any // scalars of the Go type matching dt (uint16 for the 16-bit floats)
		want any
	}{
		{"int8 wraps", Int8, Sum, int8(100), int8(100), int8(-56)},
		{"uint8 wraps", Uint8, Sum, uint8(200), uint8(100), uint8(44)},
		{"int8 prod wraps", Int8, Prod, int8(-128), int8(-1), int8(-128)},
		{"int16 prod wraps", Int16, Prod, int16(300), int16(300), int16(24464)},
		{"int32 max+1", Int32, Sum, int32(math.MaxInt32), int32(1), int32(math.MinInt32)},
		{"int64 min-1", Int64, Sum, int64(math.MinInt64), int64(-1), int64(math.MaxInt64)},
		{"uint16 wraps", Uint16, Sum, uint16(65535), uint16(2), uint16(1)},
		{"uint32 prod wraps", Uint32, Prod, uint32(1 << 31), uint32(2), uint32(0)},
		{"uint64 prod wraps", Uint64, Prod, uint64(math.MaxUint64), uint64(2), uint64(math.MaxUint64 - 1)},
		{"uint64 avg is sum", Uint64, Avg, uint64(math.MaxUint64), uint64(3), uint64(2)},
		{"int16 min", Int16, Min, int16(-5), int16(3), int16(-5)},
		{"uint32 max", Uint32, Max, uint32(5), uint32(1 << 31), uint32(1 << 31)},
		{"f32 min -0 +0", Float32, Min, float32(0), negZero32, negZero32},
		{"f32 min +0 -0", Float32, Min, negZero32, float32(0), negZero32},
		{"f32 max -0 +0", Float32, Max, negZero32, float32(0), float32(0)},
		{"f32 max +0 -0", Float32, Max, float32(0), negZero32, float32(0)},
		{"f32 min NaN first", Float32, Min, nan32, float32(1), nan32},
		{"f32 min NaN second", Float32, Min, float32(1), nan32, nan32},
		{"f32 max NaN", Float32, Max, inf32, nan32, nan32},
		{"f32 inf-inf", Float32, Sum, inf32, -inf32, nan32},
		{"f32 overflow", Float32, Sum, float32(math.MaxFloat32), float32(math.MaxFloat32), inf32},
		{"f32 subnormal sum", Float32, Sum, float32(math.SmallestNonzeroFloat32), float32(math.SmallestNonzeroFloat32), float32(2 * math.SmallestNonzeroFloat32)},
		{"f32 avg is sum", Float32, Avg, float32(1.5), float32(2.25), float32(3.75)},
		{"f32 -0 + -0", Float32, Sum, negZero32, negZero32, negZero32},
		{"f64 min -0 +0", Float64, Min, 0.0, negZero64, negZero64},
		{"f64 max -0 +0", Float64, Max, negZero64, 0.0, 0.0},
		{"f64 max NaN", Float64, Max, math.NaN(), 1.0, math.NaN()},
		{"f64 prod", Float64, Prod, 1.5, -4.0, -6.0},
		{"f16 sum", Float16, Sum, uint16(0x3c00), uint16(0x3c00), uint16(0x4000)},                // 1+1=2
		{"f16 sum to inf", Float16, Sum, uint16(0x7bff), uint16(0x4c00), uint16(0x7c00)},         // 65504+16 = 65520 -> Inf
		{"f16 sum stays finite", Float16, Sum, uint16(0x7bff), uint16(0x4bfc), uint16(0x7bff)},   // 65504+15.97 rounds down
		{"f16 sum tie to even", Float16, Sum, uint16(0x3c00), uint16(0x1000), uint16(0x3c00)},    // 1 + 2^-11: tie, stays 1
		{"f16 sum tie to even up", Float16, Sum, uint16(0x3c01), uint16(0x1000), uint16(0x3c02)}, // (1+2^-10) + 2^-11: tie, goes up
		{"f16 subnormals", Float16, Sum, uint16(0x0001), uint16(0x0001), uint16(0x0002)},         // 2^-24 + 2^-24
		{"f16 prod underflow", Float16, Prod, uint16(0x0001), uint16(0x3800), uint16(0x0000)},    // 2^-24 * 0.5: tie to 0
		{"f16 min -0 +0", Float16, Min, uint16(0x0000), uint16(0x8000), uint16(0x8000)},          //
		{"f16 max -0 +0", Float16, Max, uint16(0x8000), uint16(0x0000), uint16(0x0000)},          //
		{"f16 max NaN", Float16, Max, uint16(0x7e00), uint16(0x3c00), uint16(0x7e00)},            // NaN
		{"bf16 sum", BFloat16, Sum, uint16(0x3f80), uint16(0x3f80), uint16(0x4000)},              // 1+1=2
		{"bf16 sum tie to even", BFloat16, Sum, uint16(0x3f80), uint16(0x3b80), uint16(0x3f80)},  // 1 + 2^-8
		{"bf16 overflow", BFloat16, Sum, uint16(0x7f7f), uint16(0x7f7f), uint16(0x7f80)},         // max+max = Inf
		{"bf16 min -0 +0", BFloat16, Min, uint16(0x0000), uint16(0x8000), uint16(0x8000)},        //
		{"bf16 min NaN", BFloat16, Min, uint16(0x3f80), uint16(0xffc0), uint16(0x7fc0)},          // NaN
		{"bf16 subnormal prod", BFloat16, Prod, uint16(0x0003), uint16(0x3f00), uint16(0x0002)},  // 3*2^-133 * 0.5 = 1.5*2^-133: tie, to 2
		{"bf16 subnormal sum", BFloat16, Sum, uint16(0x0001), uint16(0x8001), uint16(0x0000)},    // tiny - tiny = +0
		{"bf16 -0 sum", BFloat16, Sum, uint16(0x8000), uint16(0x8000), uint16(0x8000)},           // -0 + -0 = -0
		{"bf16 avg", BFloat16, Avg, uint16(0x3f80), uint16(0x4000), uint16(0x4040)},              // 1+2=3
		{"f16 avg", Float16, Avg, uint16(0x3c00), uint16(0x4000), uint16(0x4200)},                // 1+2=3
		{"f16 prod overflow", Float16, Prod, uint16(0x7bff), uint16(0x4000), uint16(0x7c00)},     // 65504*2
		{"f16 -inf max", Float16, Max, uint16(0xfc00), uint16(0xfbff), uint16(0xfbff)},           // max(-Inf, -65504)
		{"f16 neg subnormal min", Float16, Min, uint16(0x8001), uint16(0x0001), uint16(0x8001)},  //
		{"f16 inf + -inf", Float16, Sum, uint16(0x7c00), uint16(0xfc00), uint16(0x7e00)},         // NaN
		{"bf16 large prod", BFloat16, Prod, uint16(0x5f80), uint16(0x5f80), uint16(0x7f80)},      // 2^64*2^64 = 2^128 = Inf
		{"bf16 smallest normal", BFloat16, Sum, uint16(0x0040), uint16(0x0040), uint16(0x0080)},  // 2^-127+2^-127 = 2^-126
		{"f16 smallest normal", Float16, Sum, uint16(0x0200), uint16(0x0200), uint16(0x0400)},    // 2^-15+2^-15 = 2^-14
		{"f16 prod exact", Float16, Prod, uint16(0x4200), uint16(0xc200), uint16(0xc880)},        // 3 * -3 = -9
		{"f16 min ordinary", Float16, Min, uint16(0x4200), uint16(0xc200), uint16(0xc200)},       // min(3, -3)
		{"bf16 max ordinary", BFloat16, Max, uint16(0x4040), uint16(0xc040), uint16(0x4040)},     // max(3, -3)
		{"f16 -0 plus +0", Float16, Sum, uint16(0x8000), uint16(0x0000), uint16(0x0000)},         // -0 + +0 = +0
		{"bf16 nan payload", BFloat16, Sum, uint16(0x7f81), uint16(0x3f80), uint16(0x7fc1)},      // NaN stays NaN
		{"f16 max both NaN", Float16, Max, uint16(0x7c01), uint16(0xfe00), uint16(0x7e00)},       // NaN
		{"f64 inf * 0", Float64, Prod, math.Inf(-1), 0.0, math.NaN()},                            //
		{"f32 prod -0", Float32, Prod, float32(-1), float32(0), negZero32},                       //
		{"f64 subnormal sum", Float64, Sum, 5e-324, 5e-324, 1e-323},                              //
		{"i8 max", Int8, Max, int8(-128), int8(127), int8(127)},                                  //
		{"u8 min", Uint8, Min, uint8(0), uint8(255), uint8(0)},                                   //
		{"u8 prod", Uint8, Prod, uint8(16), uint8(17), uint8(16)},                                // 272 mod 256
		{"i64 prod", Int64, Prod, int64(math.MaxInt64), int64(3), int64(math.MaxInt64 - 2)},      // wraps: 3*(2^63-1) = 2^63 + 2^63 - 3
		{"u16 max", Uint16, Max, uint16(1), uint16(65535), uint16(65535)},                        //
		{"i32 min", Int32, Min, int32(math.MinInt32), int32(0), int32(math.MinInt32)},            //
		{"u32 sum", Uint32, Sum, uint32(math.MaxUint32), uint32(math.MaxUint32), uint32(math.MaxUint32 - 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b, want := scalarBytes(tc.a), scalarBytes(tc.b), scalarBytes(tc.want)
			if len(a) != tc.dt.Size() || len(b) != tc.dt.Size() || len(want) != tc.dt.Size() {
				t.Fatalf("bad test case: operand sizes do not match %v", tc.dt)
			}
			// Repeat the element so that both the unrolled and the
			// remainder loops are exercised.
			const n = 19
			a, b, want = bytes.Repeat(a, n), bytes.Repeat(b, n), bytes.Repeat(want, n)
			dst := make([]byte, len(a))
			Reduce(tc.dt, tc.op, dst, a, b)
			if i := compareElems(tc.dt, dst, want); i >= 0 {
				t.Errorf("%s %s %s = %s, want %s", fmtElem(tc.dt, a, i), tc.op, fmtElem(tc.dt, b, i), fmtElem(tc.dt, dst, i), fmtElem(tc.dt, want, i))
			}
			// And the reference agrees.
			if i := compareElems(tc.dt, refReduce(tc.dt, tc.op, a, b), want); i >= 0 {
				t.Errorf("reference disagrees with the test case")
			}
		})
	}
}

// scalarBytes returns the native-endian encoding of a fixed-size scalar.
func scalarBytes(v any) []byte {
	var buf bytes.Buffer
	if err := binary.Write(&buf, ne, v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func TestReduceAliasing(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, dt := range allDTypes {
		for _, op := range allOps {
			for _, n := range []int{0, 1, 7, 8, 9, 33, 1000} {
				a := genValues(rng, dt, n)
				b := genValues(rng, dt, n)
				want := make([]byte, len(a))
				Reduce(dt, op, want, a, b)

				dstA := bytes.Clone(a)
				Reduce(dt, op, dstA, dstA, b)
				if i := compareElems(dt, dstA, want); i >= 0 {
					t.Errorf("%v %v n=%d dst==a: element %d = %s, want %s", dt, op, n, i, fmtElem(dt, dstA, i), fmtElem(dt, want, i))
				}
				dstB := bytes.Clone(b)
				Reduce(dt, op, dstB, a, dstB)
				if i := compareElems(dt, dstB, want); i >= 0 {
					t.Errorf("%v %v n=%d dst==b: element %d = %s, want %s", dt, op, n, i, fmtElem(dt, dstB, i), fmtElem(dt, want, i))
				}
				// All three the same buffer: x op x.
				self := bytes.Clone(a)
				Reduce(dt, op, self, self, self)
				if i := compareElems(dt, self, refReduce(dt, op, a, a)); i >= 0 {
					t.Errorf("%v %v n=%d dst==a==b: element %d wrong", dt, op, n, i)
				}
			}
		}
	}
}

// misaligned returns a copy of src placed at an odd address.
func misaligned(src []byte) []byte {
	backing := make([]byte, len(src)+16)
	off := 1
	if uintptr(unsafe.Pointer(&backing[0]))&1 != 0 {
		off = 2
	}
	s := backing[off : off+len(src) : off+len(src)]
	copy(s, src)
	return s
}

// TestReduceMisaligned checks the fallback for buffers that are not aligned
// for the element type, including chunking across the scratch buffer size.
func TestReduceMisaligned(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, dt := range allDTypes {
		for _, op := range []Op{Sum, Max} {
			for _, n := range []int{1, 5, 64, 700, 3001} { // 3001*8 bytes spans several scratch chunks
				a := genValues(rng, dt, n)
				b := genValues(rng, dt, n)
				want := refReduce(dt, op, a, b)

				ma, mb := misaligned(a), misaligned(b)
				dst := misaligned(make([]byte, len(a)))
				Reduce(dt, op, dst, ma, mb)
				if i := compareElems(dt, dst, want); i >= 0 {
					t.Fatalf("%v %v n=%d: element %d = %s, want %s", dt, op, n, i, fmtElem(dt, dst, i), fmtElem(dt, want, i))
				}
				// Only one operand misaligned, and aliased.
				alias := bytes.Clone(a)
				Reduce(dt, op, alias, alias, mb)
				if i := compareElems(dt, alias, want); i >= 0 {
					t.Fatalf("%v %v n=%d aliased: element %d wrong", dt, op, n, i)
				}
				alias = misaligned(b)
				Reduce(dt, op, alias, a, alias)
				if i := compareElems(dt, alias, want); i >= 0 {
					t.Fatalf("%v %v n=%d misaligned alias of b: element %d wrong", dt, op, n, i)
				}
			}
		}
	}
}

func TestReducePanicsOnMisuse(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("length mismatch", func() { Reduce(Float32, Sum, make([]byte, 8), make([]byte, 8), make([]byte, 4)) })
	mustPanic("dst length mismatch", func() { Reduce(Int8, Sum, make([]byte, 3), make([]byte, 4), make([]byte, 4)) })
	mustPanic("partial element", func() { Reduce(Float64, Sum, make([]byte, 12), make([]byte, 12), make([]byte, 12)) })
	mustPanic("invalid dtype", func() { Reduce(0, Sum, make([]byte, 4), make([]byte, 4), make([]byte, 4)) })
	mustPanic("invalid op", func() { Reduce(Float32, 0, make([]byte, 4), make([]byte, 4), make([]byte, 4)) })
	mustPanic("scale by 0", func() { Scale(Float32, make([]byte, 4), 0) })
}

func TestReduceEmpty(t *testing.T) {
	// nil and empty non-nil slices must not be dereferenced.
	for _, dt := range allDTypes {
		for _, op := range allOps {
			Reduce(dt, op, nil, nil, nil)
			Reduce(dt, op, []byte{}, []byte{}, []byte{})
		}
		Scale(dt, nil, 3)
		Scale(dt, []byte{}, 3)
	}
}

func TestScale(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, dt := range []DType{Float32, Float64, Float16, BFloat16} {
		for _, n := range []int{1, 2, 3, 7, 8, 1000, 1 << 20} {
			for _, length := range []int{0, 1, 9, 257} {
				buf := genValues(rng, dt, length)
				want := make([]byte, len(buf))
				for i := 0; i < length; i++ {
					u := getUint(dt, buf, i)
					var w uint64
					switch dt {
					case Float32:
						w = uint64(math.Float32bits(math.Float32frombits(uint32(u)) / float32(n)))
					case Float64:
						w = math.Float64bits(math.Float64frombits(u) / float64(n))
					case Float16, BFloat16:
						f := fmtF16
						if dt == BFloat16 {
							f = fmtBF16
						}
						q := float32(f.decode(uint16(u))) / float32(n)
						if math.IsNaN(float64(q)) {
							w = uint64(f.expAll() | 1)
						} else {
							w = uint64(f.encode(float64(q)))
						}
					}
					putUint(dt, want, i, w)
				}
				got := bytes.Clone(buf)
				Scale(dt, got, n)
				if i := compareElems(dt, got, want); i >= 0 {
					t.Fatalf("%v: %s / %d = %s, want %s", dt, fmtElem(dt, buf, i), n, fmtElem(dt, got, i), fmtElem(dt, want, i))
				}
				mis := misaligned(buf)
				Scale(dt, mis, n)
				if i := compareElems(dt, mis, want); i >= 0 {
					t.Fatalf("%v misaligned: %s / %d = %s, want %s", dt, fmtElem(dt, buf, i), n, fmtElem(dt, mis, i), fmtElem(dt, want, i))
				}
			}
		}
	}

	// Every float16 and bfloat16 bit pattern.
	all16 := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		ne.PutUint16(all16[2*i:], uint16(i))
	}
	for _, dt := range []DType{Float16, BFloat16} {
		f := fmtF16
		if dt == BFloat16 {
			f = fmtBF16
		}
		for _, n := range []int{3, 10, 12345} {
			got := bytes.Clone(all16)
			Scale(dt, got, n)
			for i := 0; i < 1<<16; i++ {
				h, g := uint16(i), ne.Uint16(got[2*i:])
				if f.isNaN(h) {
					if !f.isNaN(g) {
						t.Fatalf("%v: NaN %#04x / %d = %#04x, want NaN", dt, h, n, g)
					}
					continue
				}
				if want := f.encode(float64(float32(f.decode(h)) / float32(n))); g != want {
					t.Fatalf("%v: %#04x / %d = %#04x, want %#04x", dt, h, n, g, want)
				}
			}
		}
	}

	// Known values.
	f32 := scalarBytes([]float32{3, -1, float32(math.Copysign(0, -1)), float32(math.Inf(1)), 0x1p-149})
	Scale(Float32, f32, 2)
	if want := scalarBytes([]float32{1.5, -0.5, float32(math.Copysign(0, -1)), float32(math.Inf(1)), 0}); !bytes.Equal(f32, want) {
		t.Errorf("Scale float32 = %v, want %v", f32, want)
	}
	f16 := scalarBytes([]uint16{0x4200, 0x3c00, 0x0001, 0x0003, 0x7bff}) // 3, 1, 2^-24, 3*2^-24, 65504
	Scale(Float16, f16, 2)
	// 1.5, 0.5, 2^-25 (tie -> 0), 1.5*2^-24 (tie -> 2*2^-24), 32752
	if want := scalarBytes([]uint16{0x3e00, 0x3800, 0x0000, 0x0002, 0x77ff}); !bytes.Equal(f16, want) {
		t.Errorf("Scale float16 = %x, want %x", f16, want)
	}
	bf16 := scalarBytes([]uint16{0x4040, 0x3f80}) // 3, 1
	Scale(BFloat16, bf16, 3)
	if want := scalarBytes([]uint16{0x3f80, 0x3eab}); !bytes.Equal(bf16, want) { // 1, 1/3 rounded (0x3eaaaaab -> 0x3eab)
		t.Errorf("Scale bfloat16 = %x, want %x", bf16, want)
	}

	// Integers: no-op.
	for _, dt := range []DType{Int8, Int32, Uint64} {
		buf := genValues(rng, dt, 17)
		orig := bytes.Clone(buf)
		Scale(dt, buf, 4)
		if !bytes.Equal(buf, orig) {
			t.Errorf("Scale(%v) modified the buffer", dt)
		}
	}
}

// TestReduceAlignedSubslices documents the contract the fast path relies on: slices of
// a Go-allocated buffer at offsets that are multiples of the element size are
// aligned, and such sub-slices reduce correctly.
func TestReduceAlignedSubslices(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, dt := range allDTypes {
		size := dt.Size()
		a := genValues(rng, dt, 64)
		b := genValues(rng, dt, 64)
		want := refReduce(dt, Sum, a, b)
		dst := make([]byte, len(a))
		for off := 0; off < 64; off += 5 {
			lo, hi := off*size, off*size+(64-off)/2*size
			if !aligned(dst[lo:hi], dtypeInfo[dt].align) {
				t.Fatalf("%v: sub-slice at element offset %d not aligned", dt, off)
			}
			Reduce(dt, Sum, dst[lo:hi], a[lo:hi], b[lo:hi])
			if i := compareElems(dt, dst[lo:hi], want[lo:hi]); i >= 0 {
				t.Fatalf("%v offset %d: element %d wrong", dt, off, i)
			}
		}
	}
}

func TestReduceDoesNotAllocate(t *testing.T) {
	a, b := make([]byte, 4096), make([]byte, 4096)
	dst := make([]byte, 4096)
	for _, dt := range allDTypes {
		if n := testing.AllocsPerRun(10, func() { Reduce(dt, Sum, dst, a, b) }); n != 0 {
			t.Errorf("Reduce(%v) allocates %v times per call", dt, n)
		}
		if n := testing.AllocsPerRun(10, func() { Reduce(dt, Max, dst[1:1+len(a)-8], a[3:3+len(a)-8], b[:len(a)-8]) }); n != 0 {
			t.Errorf("misaligned Reduce(%v) allocates %v times per call", dt, n)
		}
		if n := testing.AllocsPerRun(10, func() { Scale(dt, dst[1:1+len(a)-8], 3) }); n != 0 {
			t.Errorf("Scale(%v) allocates %v times per call", dt, n)
		}
	}
}
