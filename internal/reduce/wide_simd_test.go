package reduce

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// The vector kernels of the wide steps (wideKernels) against a scalar
// reference written from the definitions in wide.go, at every level the
// CPU has: bit for bit, NaNs included, except that when both operands of
// a sum or product are NaN either may come out (as for the Go loops,
// whose operand order the compiler picks).

// wideStep describes one wide step for the tests: its kind, the bytes per
// element of d, a and b (0: no b), and the reference of one element.
type wideStep struct {
	name    string
	kind    wideKind
	d, a, b int
	run     func(dt DType, op Op, d, a, b []byte)
}

var wideSteps = []wideStep{
	{"Widen", wideWiden, 4, 2, 0, func(dt DType, _ Op, d, a, _ []byte) { Widen(dt, d, a) }},
	{"Narrow", wideNarrow, 2, 4, 0, func(dt DType, _ Op, d, a, _ []byte) { Narrow(dt, d, a) }},
	{"ReduceWide", wideReduce, 4, 2, 2, ReduceWide},
	{"Accumulate", wideAccumulate, 4, 4, 2, Accumulate},
	{"AccumulateNarrow", wideAccumulateNarrow, 2, 4, 2, AccumulateNarrow},
}

// refOperand reads element i of a wide step's operand of width w: a
// float32, or a 16-bit value widened as the step does (Widen quiets a
// bfloat16 NaN with BF16ToF32; the arithmetic steps use bf16Bits, and
// the operation quiets it).
func refOperand(dt DType, st wideStep, buf []byte, w, i int) float32 {
	if w == 4 {
		return getF32(buf, i)
	}
	h := ne.Uint16(buf[2*i:])
	switch {
	case dt == Float16:
		return F16ToF32(h)
	case st.kind == wideWiden:
		return BF16ToF32(h)
	}
	return bf16Bits(h)
}

// refWide computes the step element by element with scalar Go; both
// reports, per element, whether both operands were NaN.
func refWide(dt DType, op Op, st wideStep, a, b []byte) (want []byte, both []bool) {
	n := len(a) / st.a
	want = make([]byte, n*st.d)
	both = make([]bool, n)
	for i := 0; i < n; i++ {
		x := refOperand(dt, st, a, st.a, i)
		if st.b != 0 {
			y := refOperand(dt, st, b, st.b, i)
			both[i] = x != x && y != y
			if op == Prod {
				x *= y
			} else {
				x += y
			}
		}
		if st.d == 4 {
			putF32(want, i, x)
		} else {
			ne.PutUint16(want[2*i:], to16(dt, x))
		}
	}
	return want, both
}

// wideMismatch returns the first element where got differs from want,
// or -1.
func wideMismatch(dt DType, w int, got, want []byte, both []bool) int {
	for i := range both {
		if w == 4 {
			g, x := getF32(got, i), getF32(want, i)
			if math.Float32bits(g) != math.Float32bits(x) && !(both[i] && g != g && x != x) {
				return i
			}
			continue
		}
		g, x := ne.Uint16(got[2*i:]), ne.Uint16(want[2*i:])
		if g != x && !(both[i] && same16(dt, g, x)) {
			return i
		}
	}
	return -1
}

// special16 are 16-bit values of dt whose conversions have corner cases:
// zeros, subnormals, extremes, infinities and NaNs, quiet and signaling,
// with payloads and either sign.
func special16(dt DType) []uint16 {
	if dt == BFloat16 {
		return []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x807f, 0x3f80, 0x3f81, 0xbf80, 0x7f7f, 0xff7f,
			0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7fff, 0x7fa5, 0x4000, 0x3b80}
	}
	return []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x83ff, 0x3c00, 0x3c01, 0xbc00, 0x7bff, 0xfbff,
		0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7fff, 0x7d55, 0x1400, 0x0c00}
}

// special32 are float32s that round to dt with corner cases: ties (to
// even and to odd) in the normal and subnormal ranges, the overflow
// threshold, float32 subnormals, infinities and NaNs (signaling, quiet,
// with payloads the 16-bit result must not keep).
func special32(dt DType) []uint32 {
	s := []uint32{0, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x3f800000, 0xbf800000,
		0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fc00001, 0x7fe00000,
		0x7fffffff, 0xffa5a5a5, 0x7f7fffff, 0xff7fffff}
	if dt == BFloat16 {
		// Ties: dropped bits exactly 0x8000, kept lowest bit even or odd;
		// and one below and above each.
		for _, b := range []uint32{0x3f800000, 0x3f810000, 0x00010000, 0x00020000, 0x7f7e0000, 0x7f7f0000, 0xc0490000} {
			s = append(s, b|0x8000, b|0x7fff, b|0x8001)
		}
		return s
	}
	for _, f := range []float64{
		1 + 0x1p-11, 1 + 3*0x1p-11, 1 + 0x1p-11 + 0x1p-30, // ties of 1's ulp (2^-10), and above
		65504, 65519, 65520, 65536, 1e6, // the largest float16, the overflow threshold
		0x1p-14, 0x1p-14 - 0x1p-25, 0x1p-25, 3 * 0x1p-25, 5 * 0x1p-25, 0x1p-26, 0x1p-25 + 0x1p-40, // subnormal ties
		-(1 + 0x1p-11), -3 * 0x1p-25, 1e-30,
	} {
		s = append(s, math.Float32bits(float32(f)))
	}
	return s
}

// wideValues returns n operands of width w for dt: specials, random bit
// patterns and ordinary random values, mixed.
func wideValues(rng *rand.Rand, dt DType, w, n int) []byte {
	buf := make([]byte, n*w)
	for i := 0; i < n; i++ {
		x := float32(rng.NormFloat64() * math.Pow(2, float64(rng.Intn(40)-20)))
		if w == 2 {
			var v uint16
			switch rng.Intn(3) {
			case 0:
				sp := special16(dt)
				v = sp[rng.Intn(len(sp))]
			case 1:
				v = uint16(rng.Uint32())
			default:
				v = to16(dt, x)
			}
			ne.PutUint16(buf[2*i:], v)
			continue
		}
		var v uint32
		switch rng.Intn(3) {
		case 0:
			sp := special32(dt)
			v = sp[rng.Intn(len(sp))]
		case 1:
			v = rng.Uint32()
		default:
			v = math.Float32bits(x)
		}
		ne.PutUint32(buf[4*i:], v)
	}
	return buf
}

// checkWideStep runs step st on operands a and b (b nil when the step has
// none) at the active level, from buffers at random offsets inside guard
// bytes, and in place where wide.go allows it, against the reference.
func checkWideStep(t *testing.T, rng *rand.Rand, dt DType, op Op, st wideStep, a0, b0 []byte) {
	t.Helper()
	n := len(a0) / st.a
	want, both := refWide(dt, op, st, a0, b0)
	off := func() int { return rng.Intn(33) } // odd ones too: the kernels take any alignment
	a, aOK := placed(a0, off())
	var b []byte
	bOK := func() bool { return true }
	if b0 != nil {
		b, bOK = placed(b0, off())
	}
	d, dOK := placed(make([]byte, n*st.d), off())
	st.run(dt, op, d, a, b)
	where := fmt.Sprintf("%v %s %v/%v n=%d", activeLevel, st.name, dt, op, n)
	if i := wideMismatch(dt, st.d, d, want, both); i >= 0 {
		t.Fatalf("%s: element %d: %s, want %s", where, i, wideElem(d, st.d, i), wideElem(want, st.d, i))
	}
	if !aOK() || !bOK() || !dOK() {
		t.Fatalf("%s: wrote outside a buffer", where)
	}
	if !bytes.Equal(a, a0) || (b0 != nil && !bytes.Equal(b, b0)) {
		t.Fatalf("%s: an input changed", where)
	}
	// In place: Accumulate's dst may be a32, AccumulateNarrow's b16.
	switch st.kind {
	case wideAccumulate:
		Accumulate(dt, op, a, a, b)
		if i := wideMismatch(dt, 4, a, want, both); i >= 0 {
			t.Fatalf("%s in place: element %d: %s, want %s", where, i, wideElem(a, 4, i), wideElem(want, 4, i))
		}
	case wideAccumulateNarrow:
		AccumulateNarrow(dt, op, b, a, b)
		if i := wideMismatch(dt, 2, b, want, both); i >= 0 {
			t.Fatalf("%s in place: element %d: %s, want %s", where, i, wideElem(b, 2, i), wideElem(want, 2, i))
		}
	}
	if !aOK() || !bOK() {
		t.Fatalf("%s in place: wrote outside a buffer", where)
	}
}

func wideElem(buf []byte, w, i int) string {
	if w == 4 {
		return fmt.Sprintf("%#08x", math.Float32bits(getF32(buf, i)))
	}
	return fmt.Sprintf("%#04x", ne.Uint16(buf[2*i:]))
}

// wideOps are the ops of a step: Widen and Narrow have none.
func wideOps(st wideStep) []Op {
	if st.b == 0 {
		return []Op{Sum}
	}
	return []Op{Sum, Prod, Avg}
}

// TestWideSIMDLengths runs every wide step, dtype and op on every length
// 0..70 (no block, whole blocks, the unrolled loop and tails) of mixed
// special and random values, at every level.
func TestWideSIMDLengths(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	for _, dt := range []DType{Float16, BFloat16} {
		for _, st := range wideSteps {
			for _, op := range wideOps(st) {
				t.Run(fmt.Sprintf("%v/%s/%v", dt, st.name, op), func(t *testing.T) {
					for n := 0; n <= 70; n++ {
						a := wideValues(rng, dt, st.a, n)
						var b []byte
						if st.b != 0 {
							b = wideValues(rng, dt, st.b, n)
						}
						for _, l := range levels() {
							useLevel(t, l)
							checkWideStep(t, rng, dt, op, st, a, b)
						}
					}
				})
			}
		}
	}
}

// TestWideSIMDSpecialPairs runs every pair of special operands through
// every step at every level, in one buffer long enough for the vector
// loops.
func TestWideSIMDSpecialPairs(t *testing.T) {
	rng := rand.New(rand.NewSource(32))
	for _, dt := range []DType{Float16, BFloat16} {
		for _, st := range wideSteps {
			var as []uint32
			if st.a == 2 {
				for _, v := range special16(dt) {
					as = append(as, uint32(v))
				}
			} else {
				as = special32(dt)
			}
			bs := []uint16{0}
			if st.b != 0 {
				bs = special16(dt)
			}
			n := len(as) * len(bs)
			a, b := make([]byte, n*st.a), make([]byte, n*2)
			for i := 0; i < n; i++ {
				if st.a == 2 {
					ne.PutUint16(a[2*i:], uint16(as[i/len(bs)]))
				} else {
					ne.PutUint32(a[4*i:], as[i/len(bs)])
				}
				ne.PutUint16(b[2*i:], bs[i%len(bs)])
			}
			if st.b == 0 {
				b = nil
			}
			for _, op := range wideOps(st) {
				for _, l := range levels() {
					useLevel(t, l)
					checkWideStep(t, rng, dt, op, st, a, b)
				}
			}
		}
	}
}

// TestWideSIMDExhaustive widens every 16-bit pattern, narrows it back,
// and adds it to the float32 ties and specials, at every level; and
// narrows a million random float32 bit patterns.
func TestWideSIMDExhaustive(t *testing.T) {
	rng := rand.New(rand.NewSource(33))
	all := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		ne.PutUint16(all[2*i:], uint16(i))
	}
	random32 := make([]byte, 4<<20)
	for i := 0; i < len(random32); i += 4 {
		ne.PutUint32(random32[i:], rng.Uint32())
	}
	for _, dt := range []DType{Float16, BFloat16} {
		sp := special32(dt)
		acc := make([]byte, len(all)*2)
		for i := 0; i < 1<<16; i++ {
			ne.PutUint32(acc[4*i:], sp[i%len(sp)])
		}
		for _, l := range levels() {
			useLevel(t, l)
			checkWideStep(t, rng, dt, Sum, wideSteps[0], all, nil)
			checkWideStep(t, rng, dt, Sum, wideSteps[1], random32, nil)
			for _, st := range wideSteps[2:] {
				a := all
				if st.a == 4 {
					a = acc
				}
				checkWideStep(t, rng, dt, Sum, st, a, all)
				checkWideStep(t, rng, dt, Prod, st, a, all)
			}
		}
	}
}

// TestWideSIMDSelected checks that the AVX2 and AVX-512 levels use a
// vector kernel for every wide step the CPU can run, so that the tests
// above exercise them, and that a buffer longer than kernelChunk (split
// into several kernel calls) comes out right.
func TestWideSIMDSelected(t *testing.T) {
	_, feats := detectCPU()
	n := 0
	for _, k := range wideKernels {
		for l := k.lvl; l <= maxLevel; l++ {
			if wideTables[l] == nil || k.feat&^feats != 0 {
				continue
			}
			got := wideTables[l][k.dt][k.kind][wideOpIndex(k.op)]
			if !sameFunc(got.fn, k.fn) || got.block != k.block {
				t.Errorf("%v %v kind %d %v: table has %+v", l, k.dt, k.kind, k.op, got)
			}
			n++
		}
		if k.block&(k.block-1) != 0 {
			t.Errorf("%v kind %d: block %d is not a power of two", k.dt, k.kind, k.block)
		}
	}
	t.Logf("%d (level, wide kernel) pairs checked", n)
	rng := rand.New(rand.NewSource(34))
	for _, dt := range []DType{Float16, BFloat16} {
		m := kernelChunk/2 + 13
		a := wideValues(rng, dt, 4, m)
		b := wideValues(rng, dt, 2, m)
		for _, l := range levels() {
			useLevel(t, l)
			checkWideStep(t, rng, dt, Sum, wideSteps[4], a, b)
			checkWideStep(t, rng, dt, Sum, wideSteps[2], b, b)
		}
	}
}
