package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"sort"
	"testing"
	"unsafe"

	"github.com/gocoll/gocoll/internal/exactref"
)

// The oracle: the exact sum in a math/big.Float, rounded to the type by
// big.Float's own conversions (float32, float64) or by searching the
// sorted list of every finite 16-bit value (float16, bfloat16), with the
// special values by the rules documented in exact.go.

var exactTypes = []DType{Float16, BFloat16, Float32, Float64}

// formats are exactref's names for them: its oracle, with its own
// rounding, is checked against this file's.
var formats = map[DType]exactref.Format{Float16: exactref.Float16, BFloat16: exactref.BFloat16, Float32: exactref.Float32, Float64: exactref.Float64}

// bitsOf reads element i of b as raw bits.
func bitsOf(dt DType, b []byte, i int) uint64 {
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

func putBits(dt DType, b []byte, i int, v uint64) {
	switch dt.Size() {
	case 1:
		b[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

// value is the float64 value of a dt bit pattern (NaNs as NaN).
func value(dt DType, v uint64) float64 {
	switch dt {
	case Float16:
		return float64(F16ToF32(uint16(v)))
	case BFloat16:
		return float64(BF16ToF32(uint16(v)))
	case Float32:
		return float64(math.Float32frombits(uint32(v)))
	}
	return math.Float64frombits(v)
}

var nanBits = map[DType]uint64{Float16: exactNaN16, BFloat16: exactNaNBF, Float32: exactNaN32, Float64: exactNaN64}
var infBits = map[DType]uint64{Float16: 0x7c00, BFloat16: 0x7f80, Float32: 0x7f800000, Float64: 0x7ff0000000000000}
var signBit = map[DType]uint64{Float16: 0x8000, BFloat16: 0x8000, Float32: 0x80000000, Float64: 1 << 63}

// halfValues are the non-negative finite values of a 16-bit type in
// increasing order, with their bits, then 2^(emax+1) standing for +Inf
// (with even bits, so that a tie at the overflow threshold goes to Inf).
type halfTable struct {
	vals []*big.Float
	bits []uint64
}

var halfTables = map[DType]*halfTable{}

func halfTableOf(dt DType) *halfTable {
	if t := halfTables[dt]; t != nil {
		return t
	}
	t := &halfTable{}
	for b := uint64(0); b < 0x8000; b++ {
		f := value(dt, b)
		if math.IsInf(f, 0) || f != f {
			break // bits above Inf are NaNs
		}
		t.vals = append(t.vals, new(big.Float).SetFloat64(f))
		t.bits = append(t.bits, b)
	}
	top := 16.0
	if dt == BFloat16 {
		top = 128
	}
	t.vals = append(t.vals, new(big.Float).SetMantExp(big.NewFloat(1), int(top)))
	t.bits = append(t.bits, infBits[dt])
	halfTables[dt] = t
	return t
}

// oracle is the documented ExactSum of xs (bit patterns of dt).
func oracle(dt DType, xs []uint64) uint64 {
	pinf, ninf, negZeros := false, false, 0
	sum := new(big.Float).SetPrec(exactPrec)
	for _, x := range xs {
		f := value(dt, x)
		switch {
		case f != f:
			return nanBits[dt]
		case math.IsInf(f, 1):
			pinf = true
		case math.IsInf(f, -1):
			ninf = true
		default:
			if f == 0 && math.Signbit(f) {
				negZeros++
			}
			sum.Add(sum, new(big.Float).SetFloat64(f))
		}
	}
	switch {
	case pinf && ninf:
		return nanBits[dt]
	case pinf:
		return infBits[dt]
	case ninf:
		return infBits[dt] | signBit[dt]
	case negZeros == len(xs):
		return signBit[dt]
	case sum.Sign() == 0:
		return 0
	}
	switch dt {
	case Float32:
		f, _ := sum.Float32()
		return uint64(math.Float32bits(f))
	case Float64:
		f, _ := sum.Float64()
		return math.Float64bits(f)
	}
	t := halfTableOf(dt)
	a := new(big.Float).Abs(sum)
	k := sort.Search(len(t.vals), func(j int) bool { return t.vals[j].Cmp(a) >= 0 })
	var r uint64
	switch {
	case k == len(t.vals):
		r = infBits[dt]
	case t.vals[k].Cmp(a) == 0:
		r = t.bits[k]
	default:
		lo, hi := t.vals[k-1], t.vals[k]
		dlo := new(big.Float).SetPrec(exactPrec).Sub(a, lo)
		dhi := new(big.Float).SetPrec(exactPrec).Sub(hi, a)
		switch c := dlo.Cmp(dhi); {
		case c < 0:
			r = t.bits[k-1]
		case c > 0:
			r = t.bits[k]
		case t.bits[k-1]&1 == 0:
			r = t.bits[k-1]
		default:
			r = t.bits[k]
		}
	}
	if sum.Sign() < 0 {
		r |= signBit[dt]
	}
	return r
}

// adversarial is exactref's adversarial draw for dt.
func adversarial(rng *rand.Rand, dt DType, prev []uint64) uint64 {
	return exactref.Adversarial(rng, formats[dt], prev)
}

func alignedBuf(n int) []byte {
	w := make([]uint64, (n+7)/8+1)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)[:n:n]
}

// checkExact runs Exact on rows[q] (the n inputs' element bits) and
// compares every element with the oracle, bitwise.
func checkExact(t *testing.T, dt DType, rows [][]uint64) {
	t.Helper()
	n, count, es := len(rows), len(rows[0]), dt.Size()
	ins := make([][]byte, n)
	for q := range ins {
		ins[q] = alignedBuf(count * es)
		for i, v := range rows[q] {
			putBits(dt, ins[q], i, v)
		}
	}
	out := alignedBuf(count * es)
	Exact(dt, out, ins)
	// The same into the last input, as the collectives do with the
	// owner's own block: the result must not change.
	last := alignedBuf(count * es)
	copy(last, ins[n-1])
	aliased := append(append([][]byte(nil), ins[:n-1]...), last)
	Exact(dt, last, aliased)
	if string(last) != string(out) {
		t.Fatalf("%v: the result into one of the inputs differs from the result elsewhere", dt)
	}
	xs := make([]uint64, n)
	for i := 0; i < count; i++ {
		for q := range rows {
			xs[q] = rows[q][i]
		}
		want := oracle(dt, xs)
		if ref := exactref.Sum(formats[dt], xs); ref != want {
			t.Fatalf("%v element %d: the two oracles disagree on %#x: %#x and %#x", dt, i, xs, want, ref)
		}
		if got := bitsOf(dt, out, i); got != want {
			vals := make([]float64, n)
			for q := range xs {
				vals[q] = value(dt, xs[q])
			}
			t.Fatalf("%v element %d: sum of %#x = %v: got %#x (%v), want %#x (%v)",
				dt, i, xs, vals, got, value(dt, got), want, value(dt, want))
		}
	}
}

func TestExactAdversarial(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	count := 3000
	if testing.Short() {
		count = 600
	}
	for _, dt := range exactTypes {
		for n := 1; n <= 8; n++ {
			t.Run(fmt.Sprintf("%v/n=%d", dt, n), func(t *testing.T) {
				rows := make([][]uint64, n)
				for q := range rows {
					rows[q] = make([]uint64, count)
				}
				prev := make([]uint64, 0, n)
				for i := 0; i < count; i++ {
					prev = prev[:0]
					for q := range rows {
						rows[q][i] = adversarial(rng, dt, prev)
						prev = append(prev, rows[q][i])
					}
				}
				checkExact(t, dt, rows)
			})
		}
	}
}

// TestExactMostlyFast is float32 data as the fast path sees it in use:
// values of nearby scales, the vector kernel's groups of eight, with an
// adversarial element here and there (which stops the kernel mid-buffer
// and hands that group to the Go code), Inf and NaN inputs, which the
// kernel finishes itself, and a tail shorter than a group.
func TestExactMostlyFast(t *testing.T) {
	rng := rand.New(rand.NewSource(44))
	for n := 1; n <= 8; n++ {
		for _, count := range []int{7, 8, 64, 1003} {
			t.Run(fmt.Sprintf("n=%d/count=%d", n, count), func(t *testing.T) {
				rows := make([][]uint64, n)
				for q := range rows {
					rows[q] = make([]uint64, count)
				}
				prev := make([]uint64, 0, n)
				for i := 0; i < count; i++ {
					odd, special := rng.Intn(40) == 0, rng.Intn(8) == 0
					prev = prev[:0]
					for q := range rows {
						v := uint64(math.Float32bits(float32(rng.NormFloat64() * 1000)))
						switch {
						case odd:
							v = adversarial(rng, Float32, prev)
						case special && rng.Intn(n) == 0:
							// Inf or NaN (any payload) among ordinary values.
							v = []uint64{0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001}[rng.Intn(5)]
						}
						rows[q][i] = v
						prev = append(prev, v)
					}
				}
				checkExact(t, Float32, rows)
			})
		}
	}
}

// TestExactCases are the rules spelled out in exact.go, one by one.
func TestExactCases(t *testing.T) {
	f32 := func(f float32) uint64 { return uint64(math.Float32bits(f)) }
	f64 := math.Float64bits
	cases := []struct {
		name string
		dt   DType
		in   []uint64
		want uint64
	}{
		{"tie to even down", Float32, []uint64{f32(1), f32(0x1p-24)}, f32(1)},
		{"tie to even up", Float32, []uint64{f32(1 + 0x1p-23), f32(0x1p-24)}, f32(1 + 0x1p-22)},
		{"tie broken by a tiny third", Float32, []uint64{f32(1), f32(0x1p-24), f32(0x1p-149)}, f32(1 + 0x1p-23)},
		{"tie broken below", Float32, []uint64{f32(1), f32(0x1p-24), f32(-0x1p-149)}, f32(1)},
		{"cancellation leaves the small one", Float32, []uint64{f32(math.MaxFloat32), f32(0x1p-149), f32(-math.MaxFloat32)}, f32(0x1p-149)},
		{"overflow", Float32, []uint64{f32(math.MaxFloat32), f32(math.MaxFloat32)}, infBits[Float32]},
		{"overflow then back", Float64, []uint64{f64(math.MaxFloat64), f64(math.MaxFloat64), f64(-math.MaxFloat64)}, f64(math.MaxFloat64)},
		{"float64 tie broken far below", Float64, []uint64{f64(1), f64(0x1p-53), f64(0x1p-1074)}, f64(1 + 0x1p-52)},
		{"-0 + -0", Float32, []uint64{f32(float32(math.Copysign(0, -1))), f32(float32(math.Copysign(0, -1)))}, 0x80000000},
		{"-0 + +0", Float64, []uint64{1 << 63, 0}, 0},
		{"x + -x", Float64, []uint64{f64(3), f64(-3)}, 0},
		{"Inf + -Inf", Float32, []uint64{infBits[Float32], infBits[Float32] | signBit[Float32]}, exactNaN32},
		{"NaN payload", Float32, []uint64{0xffc01234, f32(1)}, exactNaN32},
		{"Inf wins", Float16, []uint64{0x7c00, 0xfbff}, 0x7c00},
		{"float16 subnormal sum", Float16, []uint64{0x0001, 0x0001, 0x8001}, 0x0001},
		{"float16 double rounding", Float16, []uint64{0x3c00, 0x1000, 0x0001}, 0x3c01}, // 1 + 2^-11 + 2^-24: above the tie
		{"bfloat16 spread", BFloat16, []uint64{0x7f7f, 0x0001, 0xff7f}, 0x0001},
		{"one NaN rank", Float64, []uint64{0x7ff0000000000001}, exactNaN64},
		{"one -0 rank", Float16, []uint64{0x8000}, 0x8000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := oracle(tc.dt, tc.in); got != tc.want {
				t.Fatalf("oracle: got %#x, want %#x", got, tc.want)
			}
			rows := make([][]uint64, len(tc.in))
			for q, v := range tc.in {
				rows[q] = []uint64{v}
			}
			checkExact(t, tc.dt, rows)
		})
	}
}

// TestExactOrderFree: every permutation of the inputs gives the same bits.
func TestExactOrderFree(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, dt := range exactTypes {
		n, count, es := 6, 500, dt.Size()
		ins := make([][]byte, n)
		for q := range ins {
			ins[q] = alignedBuf(count * es)
		}
		for i := 0; i < count; i++ {
			var prev []uint64
			for q := range ins {
				v := adversarial(rng, dt, prev)
				prev = append(prev, v)
				putBits(dt, ins[q], i, v)
			}
		}
		first := alignedBuf(count * es)
		Exact(dt, first, ins)
		for k := 0; k < 10; k++ {
			rng.Shuffle(n, func(a, b int) { ins[a], ins[b] = ins[b], ins[a] })
			out := alignedBuf(count * es)
			Exact(dt, out, ins)
			if string(out) != string(first) {
				t.Fatalf("%v: a permutation of the inputs changed the result", dt)
			}
		}
	}
}

// TestExactAliasAndInts: out may be one of the inputs; integers are Sum.
func TestExactAliasAndInts(t *testing.T) {
	for _, dt := range []DType{Int32, Uint8, Float32} {
		es := dt.Size()
		ins := [][]byte{alignedBuf(4 * es), alignedBuf(4 * es), alignedBuf(4 * es)}
		for q := range ins {
			for i := 0; i < 4; i++ {
				putBits(dt, ins[q], i, uint64(q*100+i+1))
				if dt == Float32 {
					putBits(dt, ins[q], i, uint64(math.Float32bits(float32(q*100+i+1))))
				}
			}
		}
		Exact(dt, ins[2], ins) // out is input 2
		for i := 0; i < 4; i++ {
			want := uint64(300 + 3*(i+1))
			if dt == Uint8 {
				want &= 0xff
			}
			if dt == Float32 {
				want = uint64(math.Float32bits(float32(want)))
			}
			if got := bitsOf(dt, ins[2], i); got != want {
				t.Fatalf("%v element %d: got %d, want %d", dt, i, got, want)
			}
		}
	}
}

// FuzzExact compares Exact with the oracle on arbitrary bits: the first
// byte picks the type and the number of inputs, the rest are elements.
func FuzzExact(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		dt := exactTypes[int(data[0])%len(exactTypes)]
		n := 1 + int(data[0]>>2)%8
		es := dt.Size()
		data = data[1:]
		count := len(data) / (n * es)
		if count == 0 {
			return
		}
		rows := make([][]uint64, n)
		for q := range rows {
			rows[q] = make([]uint64, count)
			for i := range rows[q] {
				off := (i*n + q) * es
				var b [8]byte
				copy(b[:], data[off:off+es])
				rows[q][i] = binary.LittleEndian.Uint64(b[:])
			}
		}
		checkExact(t, dt, rows)
	})
}

func BenchmarkExactF32(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			const count = 1 << 16
			rng := rand.New(rand.NewSource(1))
			ins := make([][]byte, n)
			for q := range ins {
				ins[q] = alignedBuf(4 * count)
				for i := 0; i < count; i++ {
					putBits(Float32, ins[q], i, uint64(math.Float32bits(float32(rng.NormFloat64()))))
				}
			}
			out := alignedBuf(4 * count)
			sum := alignedBuf(4 * count)
			b.Run("exact", func(b *testing.B) {
				b.SetBytes(4 * count)
				for range b.N {
					Exact(Float32, out, ins)
				}
			})
			b.Run("sum", func(b *testing.B) {
				b.SetBytes(4 * count)
				for range b.N {
					Reduce(Float32, Sum, sum, ins[0], ins[1])
					for q := 2; q < n; q++ {
						Reduce(Float32, Sum, sum, sum, ins[q])
					}
				}
			})
		})
	}
}
