package reduce

import (
	"math"
	"math/rand"
	"testing"
)

// halfFormat describes a 16-bit binary floating-point format for the
// reference conversions below, which work from the definitions with float64
// arithmetic rather than bit tricks.
type halfFormat struct {
	name  string
	ebits int // exponent field width
	mbits int // mantissa (trailing significand) field width
}

var (
	fmtF16  = halfFormat{"float16", 5, 10}
	fmtBF16 = halfFormat{"bfloat16", 8, 7}
)

func (f halfFormat) bias() int      { return 1<<(f.ebits-1) - 1 }
func (f halfFormat) emin() int      { return 1 - f.bias() }
func (f halfFormat) emax() int      { return f.bias() }
func (f halfFormat) expAll() uint16 { return uint16(1<<f.ebits-1) << f.mbits }
func (f halfFormat) mantMask() uint16 {
	return uint16(1<<f.mbits - 1)
}

func (f halfFormat) isNaN(h uint16) bool {
	return h&f.expAll() == f.expAll() && h&f.mantMask() != 0
}

// decode returns the value of h; NaN for any NaN encoding.
func (f halfFormat) decode(h uint16) float64 {
	neg := h&0x8000 != 0
	e := int(h>>f.mbits) & (1<<f.ebits - 1)
	m := int(h & f.mantMask())
	var v float64
	switch e {
	case 0: // zero or subnormal: 0.m * 2^emin
		v = math.Ldexp(float64(m), f.emin()-f.mbits)
	case 1<<f.ebits - 1:
		if m != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	default: // 1.m * 2^(e-bias)
		v = math.Ldexp(float64(1<<f.mbits+m), e-f.bias()-f.mbits)
	}
	if neg {
		v = math.Copysign(v, -1)
	}
	return v
}

// encode rounds x (not NaN) to the nearest representable value, ties to the
// even encoding, overflowing to Inf.
func (f halfFormat) encode(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
		x = -x
	}
	if math.IsInf(x, 1) {
		return sign | f.expAll()
	}
	if x == 0 {
		return sign
	}
	_, e := math.Frexp(x) // x in [2^(e-1), 2^e)
	e--
	if e < f.emin() {
		e = f.emin() // subnormal range: fixed quantum
	}
	quantum := math.Ldexp(1, e-f.mbits)
	k := math.RoundToEven(x / quantum) // x/quantum is exact: quantum is a power of two
	one := float64(int(1) << f.mbits)
	if k >= 2*one { // rounded up into the next binade
		k /= 2
		e++
	}
	if e > f.emax() {
		return sign | f.expAll()
	}
	if k < one { // subnormal (or zero), only possible with e == emin
		return sign | uint16(k)
	}
	return sign | uint16(e+f.bias())<<f.mbits | uint16(k-one)
}

func TestF16ToF32Exhaustive(t *testing.T) {
	testDecodeExhaustive(t, fmtF16, F16ToF32)
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	testDecodeExhaustive(t, fmtBF16, BF16ToF32)
}

func testDecodeExhaustive(t *testing.T, f halfFormat, conv func(uint16) float32) {
	t.Helper()
	bad := 0
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := conv(h)
		want := f.decode(h)
		switch {
		case math.IsNaN(want):
			if !math.IsNaN(float64(got)) || math.Float32bits(got)&f32QuietBit == 0 {
				t.Errorf("%s %#04x: got %v (%#08x), want a quiet NaN", f.name, h, got, math.Float32bits(got))
				bad++
			}
			if math.Signbit(float64(got)) != (h&0x8000 != 0) {
				t.Errorf("%s %#04x: NaN sign not preserved", f.name, h)
				bad++
			}
		case float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want):
			t.Errorf("%s %#04x: got %v, want %v", f.name, h, got, want)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many errors")
		}
	}
}

func TestF16RoundTripExhaustive(t *testing.T) {
	testRoundTripExhaustive(t, fmtF16, F16ToF32, F32ToF16)
}

func TestBF16RoundTripExhaustive(t *testing.T) {
	testRoundTripExhaustive(t, fmtBF16, BF16ToF32, F32ToBF16)
}

func testRoundTripExhaustive(t *testing.T, f halfFormat, dec func(uint16) float32, enc func(float32) uint16) {
	t.Helper()
	bad := 0
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := enc(dec(h))
		if f.isNaN(h) {
			if !f.isNaN(got) || got&0x8000 != h&0x8000 {
				t.Errorf("%s %#04x: round trip gave %#04x, want a NaN with the same sign", f.name, h, got)
				bad++
			}
		} else if got != h {
			t.Errorf("%s %#04x: round trip gave %#04x", f.name, h, got)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many errors")
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	testEncodeRounding(t, fmtF16, F32ToF16)
}

func TestF32ToBF16Rounding(t *testing.T) {
	testEncodeRounding(t, fmtBF16, F32ToBF16)
}

// testEncodeRounding checks every halfway point between consecutive finite
// values of the format (and its neighbours one float32 ulp either side),
// named boundary cases, and a random sample of float32 inputs against the
// reference encoder.
func testEncodeRounding(t *testing.T, f halfFormat, enc func(float32) uint16) {
	t.Helper()
	bad := 0
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		if bad++; bad > 20 {
			t.Fatal("too many errors")
		}
	}
	check := func(x float32, want uint16) {
		t.Helper()
		if got := enc(x); got != want {
			fail("%s: encode(%v = %#08x) = %#04x, want %#04x", f.name, x, math.Float32bits(x), got, want)
		}
		if ref := f.encode(float64(x)); ref != want {
			fail("%s: reference encode(%v) = %#04x, test expects %#04x", f.name, x, ref, want)
		}
	}

	maxFinite := f.expAll() - 1 // largest finite encoding
	for h := uint16(0); h < maxFinite; h++ {
		lo, hi := f.decode(h), f.decode(h+1)
		mid := (lo + hi) / 2
		x := float32(mid)
		if float64(x) != mid {
			t.Fatalf("%s: midpoint %v between %#04x and %#04x not exact in float32", f.name, mid, h, h+1)
		}
		even := h // consecutive encodings: the even one has the even mantissa
		if h&1 != 0 {
			even = h + 1
		}
		for _, sign := range []uint16{0, 0x8000} {
			xs, below, above := x, math.Nextafter32(x, 0), math.Nextafter32(x, float32(math.Inf(1)))
			if sign != 0 {
				xs, below, above = -xs, -below, -above
			}
			check(xs, sign|even)
			check(below, sign|h)
			check(above, sign|(h+1))
			check(float32(lo)*float32(1-2*int(sign>>15)), sign|h) // exact values map to themselves
		}
	}

	// Boundaries.
	inf := f.expAll()
	top := f.decode(maxFinite)
	// The halfway point above the largest finite value (65520 for float16)
	// rounds to Inf: the largest finite has an odd mantissa.
	overflow := top + math.Ldexp(1, f.emax()-f.mbits-1)
	check(float32(top), maxFinite)
	check(float32(overflow), inf)
	check(-float32(overflow), 0x8000|inf)
	check(math.Nextafter32(float32(overflow), 0), maxFinite)
	check(float32(math.Inf(1)), inf)
	check(float32(math.Inf(-1)), 0x8000|inf)
	check(math.MaxFloat32, inf)
	tiny := math.Ldexp(1, f.emin()-f.mbits) // smallest subnormal
	check(float32(tiny), 1)
	check(float32(tiny/2), 0) // tie: rounds to even (zero)
	check(-float32(tiny/2), 0x8000)
	check(math.Nextafter32(float32(tiny/2), 1), 1)
	check(float32(tiny*1.5), 2) // tie between 1 and 2: even is 2
	check(float32(tiny/4), 0)
	check(math.SmallestNonzeroFloat32, 0)
	check(-math.SmallestNonzeroFloat32, 0x8000)
	check(0, 0)
	check(float32(math.Copysign(0, -1)), 0x8000)
	minNormal := math.Ldexp(1, f.emin())
	check(float32(minNormal), 1<<f.mbits)
	check(math.Nextafter32(float32(minNormal), 0), 1<<f.mbits) // rounds up from the subnormal range
	if f == fmtF16 {
		check(65504, 0x7bff)
		check(65519.996, 0x7bff)
		check(65520, 0x7c00)
		check(0x1p-24, 0x0001)
		check(0x1p-25, 0x0000)
		check(1, 0x3c00)
		check(-2, 0xc000)
		check(1+0x1p-11, 0x3c00) // tie, even is 1.0
		check(1+3*0x1p-11, 0x3c02)
	}
	if f == fmtBF16 {
		check(1, 0x3f80)
		check(1+0x1p-8, 0x3f80)   // tie, even is 1.0
		check(1+3*0x1p-8, 0x3f82) // tie, even is 1+2^-6
		check(math.MaxFloat32, 0x7f80)
	}

	// NaNs stay (quiet) NaNs and keep their sign.
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7f802000} {
		got := enc(math.Float32frombits(bits))
		if !f.isNaN(got) || got&0x8000 != uint16(bits>>16)&0x8000 {
			fail("%s: encode(NaN %#08x) = %#04x, want a NaN with the same sign", f.name, bits, got)
		}
	}

	// Random float32 inputs: arbitrary bit patterns, and values concentrated
	// around the format's range.
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200000; i++ {
		var x float32
		if i%2 == 0 {
			x = math.Float32frombits(rng.Uint32())
		} else {
			exp := f.emin() - f.mbits - 3 + rng.Intn(f.emax()-f.emin()+f.mbits+6)
			x = float32(math.Ldexp(1+rng.Float64(), exp))
			if rng.Intn(2) == 0 {
				x = -x
			}
		}
		if math.IsNaN(float64(x)) {
			continue
		}
		if got, want := enc(x), f.encode(float64(x)); got != want {
			fail("%s: encode(%v = %#08x) = %#04x, reference %#04x", f.name, x, math.Float32bits(x), got, want)
		}
	}
}
