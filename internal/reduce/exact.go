package reduce

import (
	"math"
	"math/big"
	"math/bits"
)

// ExactSum: the correctly rounded sum.
//
// [Exact], the kernel of [ExactSum], is given the n inputs of a block at once and
// writes, for each element, the exact sum of the n values rounded once to
// the element type, to nearest with ties to even. That result is a
// function of the multiset of inputs alone, so it does not depend on
// their order, on how many partial sums a collective formed or on where.
//
// # Method
//
// Every input of every float type is exactly a float64. Most float32,
// bfloat16 and float16 elements take the fast path (below): a plain
// float64 sum that is provably exact. The others, and every float64
// element, add the inputs in float64 with TwoSum (Knuth), which gives the
// rounded sum t = fl(s+x) and its error e = (s+x) - t exactly, with no
// condition on the operands' order or magnitude (as long as nothing
// overflows): s + c + (all later inputs) stays equal to the exact sum so
// far when c collects the errors. The errors themselves are added into c
// with TwoSum too; as long as each of those second-level errors is zero,
// the exact sum S is s + c, two float64s. Then
//
//   - h = fl(s + c) is RN64(S), S rounded to float64 once, and l = S - h
//     (TwoSum again) is exact;
//   - for float64, h is the answer;
//   - for a narrower type T (float32, bfloat16, float16) the candidates
//     for RN_T(S) and the midpoints between them are all float64 numbers
//     (T's precision and exponent range fit inside float64's), and
//     rounding is monotone, so S and h lie on the same side of every
//     such midpoint, or h is the midpoint itself. So RN_T(S) = RN_T(h),
//     except when h is a midpoint and l != 0: then the sign of l says on
//     which side S is. roundTo implements exactly this.
//
// Why the fast path always holds where it is claimed to:
//
//   - float16: every value is an integer multiple of 2^-24 below 2^16 in
//     magnitude, so any partial sum of n < 2^13 of them is a multiple of
//     2^-24 below 2^29, 53 bits: every float64 addition is exact (e = 0),
//     and S = s.
//   - bfloat16 and float32: values are multiples of 2^-149 up to 2^128.
//     Sums of values within a 2^29 ratio of each other are exact in
//     float64; beyond, e is nonzero but c absorbs it exactly unless the
//     errors themselves span more than 53 bits, which needs inputs spread
//     over three or more widely separated scales. Those elements, float64
//     overflow (float64 inputs summing past MaxFloat64 on the way) and
//     every Inf or NaN input go to the slow path.
//
// The slow path (exactSlow) handles non-finite inputs by IEEE's rules
// (see below) and otherwise adds the inputs in a math/big.Float with
// enough precision to hold any sum of them exactly (the whole exponent
// range of float64, 2098 bits, plus the bits n inputs can carry), and
// rounds that once, through the same h and sign(l) as the fast path. It
// is correct for any input but costs about a microsecond per element; on
// ordinary data (values of a few nearby scales) it is not taken.
//
// # Special values
//
//   - Any NaN input, or +Inf and -Inf together (as IEEE's Inf + -Inf),
//     gives NaN. The NaN is canonical, whatever the inputs' payloads: the
//     positive quiet NaN with no payload (float32 0x7fc00000, float64
//     0x7ff8000000000000, float16 0x7e00, bfloat16 0x7fc0). IEEE leaves
//     the payload of a sum of NaNs to the implementation and it follows
//     the order of the operands, which an exact sum must not depend on.
//   - Otherwise an infinite input gives that infinity.
//   - A finite exact sum beyond the largest finite value (after rounding)
//     is ±Inf, as one IEEE addition would give.
//   - An exact sum of zero is -0 if every input is -0, else +0 (IEEE's
//     rule for x + y = 0 under round to nearest).
//
// Integers: ExactSum is Sum (exact modulo wrap-around already).

// canonical NaNs of each float type, as ExactSum writes them.
const (
	exactNaN32 = 0x7fc00000
	exactNaN64 = 0x7ff8000000000000
	exactNaN16 = 0x7e00
	exactNaNBF = 0x7fc0
)

// fmtParams are a narrower float type's precision p (bits, the leading
// one included) and its smallest and largest normal exponents.
type fmtParams struct{ p, emin, emax int }

var (
	paramsF32  = fmtParams{24, -126, 127}
	paramsBF16 = fmtParams{8, -126, 127}
	paramsF16  = fmtParams{11, -14, 15}
)

// Exact sets out[i] to the sum of ins[q][i] over every q, rounded once
// (see above). Every buffer has len(out) bytes, a whole number of dt
// elements; out may be one of ins (same start) but must not otherwise
// overlap them. There must be at least one input.
func Exact(dt DType, out []byte, ins [][]byte) {
	if len(ins) == 0 || !dt.Valid() {
		panic("reduce: Exact: no inputs or invalid dtype " + dt.String())
	}
	for _, in := range ins {
		if len(in) != len(out) {
			panic("reduce: Exact: inputs of unequal length")
		}
	}
	if len(out) == 0 {
		return
	}
	if !dt.IsFloat() {
		exactInt(dt, out, ins)
		return
	}
	if !aligned(out, dtypeInfo[dt].align) {
		panic("reduce: Exact: misaligned buffer")
	}
	for _, in := range ins {
		if !aligned(in, dtypeInfo[dt].align) {
			panic("reduce: Exact: misaligned buffer")
		}
	}
	var xs [16]float64 // the slow path's inputs, for up to 16 ranks without allocating
	vals := xs[:0]
	if len(ins) > len(xs) {
		vals = make([]float64, 0, len(ins))
	}
	switch dt {
	case Float32:
		exactF32(view[float32](out), ins, vals)
	case Float64:
		exactF64(view[float64](out), ins, vals)
	case Float16, BFloat16:
		exactHalf(dt, view[uint16](out), ins, vals)
	}
}

// ExactAligned says whether b starts where Exact may read dt's elements
// (Exact panics otherwise).
func ExactAligned(dt DType, b []byte) bool {
	return aligned(b, dtypeInfo[dt].align)
}

// exactInt is Sum, in an order that reads an input that out aliases
// before writing out.
func exactInt(dt DType, out []byte, ins [][]byte) {
	first := 0
	for q, in := range ins {
		if &in[0] == &out[0] {
			first = q
		}
	}
	if len(ins) == 1 {
		copy(out, ins[0])
		return
	}
	a := ins[first]
	for q, in := range ins {
		if q == first {
			continue
		}
		Reduce(dt, Sum, out, a, in)
		a = out
	}
}

// twoSum returns fl(a+b) and the exact error (a+b) - fl(a+b) (Knuth).
func twoSum(a, b float64) (float64, float64) {
	t := a + b
	bb := t - a
	return t, (a - (t - bb)) + (b - bb)
}

// accumulate adds x into the pair (s, c) that holds the exact sum so far
// as s + c, and reports false when it no longer can (an error of c's own,
// or a NaN from an Inf, a NaN or an overflow).
func accumulate(s, c, x float64) (float64, float64, bool) {
	s, e := twoSum(s, x)
	if e == 0 {
		return s, c, true
	}
	c, f := twoSum(c, e)
	return s, c, f == 0
}

// The fast path. Most elements need no TwoSum at all: float32 and
// bfloat16 inputs are exact float64s, and their float64 sum s is exact
// when the exponents of the nonzero inputs span little enough: all are
// multiples of the ulp u of the one of smallest exponent emin (for a
// subnormal, of exponent field 1), and |S| and every partial sum stay
// below n·2^(emax+1) in units of the largest exponent emax, so they need
// at most (emax - emin) + (mantissa bits + 1) + ceil(log2 n) bits, which
// float64 holds when that is at most 53. Then s is S, and one rounding of
// s is the answer. The exponents come from the bits, with integer min and
// max, cheaper than TwoSum's six dependent additions per input. Elements
// outside the window (or with an Inf or NaN: exponent field 255) take
// the TwoSum path, exactElem.

// window is the largest exponent span for which n inputs of mant stored
// mantissa bits sum exactly in float64.
func window(n, mant int) int32 {
	return int32(53 - (mant + 1) - bits.Len(uint(n-1)))
}

func exactF32(out []float32, ins [][]byte, vals []float64) {
	n := len(ins)
	vs := make([][]float32, n)
	var ptrs [16]*float32 // the kernel's input pointers, for up to 16 ranks without allocating
	ps := ptrs[:0]
	if n > len(ptrs) {
		ps = make([]*float32, 0, n)
	}
	for q := range ins {
		vs[q] = view[float32](ins[q])[:len(out)]
		ps = append(ps, &vs[q][0])
	}
	w := window(n, 23) // negative beyond 2^29 inputs: no fast path
	// Element i reads only element i of the inputs, so writing out[i]
	// once it is computed is safe where out is one of them.
	for i := 0; i < len(out); {
		i = exactF32Vec(out, ps, i, w)
		// The group the kernel stopped at (an element outside the
		// window), or the tail, or everything without a kernel.
		for end := min(i+8, len(out)); i < end; i++ {
			out[i] = exactOneF32(vs, i, w, vals)
		}
	}
}

// exactOneF32 is element i of float32 inputs vs: the fast path where
// the exponents of its inputs span at most w, or where one is Inf or NaN
// (their float64 sum s is then NaN or the infinity the rules give, as
// no sum of float32s overflows float64), else exactElemF32. The
// exponent span comes from the magnitudes' bits, which order as the
// magnitudes do: mx is the largest, mn the smallest nonzero minus one (a
// zero, minus one, wraps to the largest uint32).
func exactOneF32(vs [][]float32, i int, w int32, vals []float64) float32 {
	s := math.Copysign(0, -1) // -0 is the identity of addition, for -0 too
	mx, mn := uint32(0), uint32(math.MaxUint32)
	for _, v := range vs {
		x := v[i]
		a := math.Float32bits(x) & 0x7fffffff
		s += float64(x)
		mx = max(mx, a)
		mn = min(mn, a-1)
	}
	emax := int32(mx >> 23)
	emin := int32(max((mn+1)>>23, 1)) // subnormals: the ulp of exponent 1
	if mn == math.MaxUint32 {
		emin = 255 // every input zero: no bits at all
	}
	switch {
	case emax == 255 && s != s:
		return math.Float32frombits(exactNaN32) // a NaN, or +Inf and -Inf
	case emax == 255:
		return float32(s) // the infinity: finite float32s cannot overflow s
	case emax-emin <= w:
		return float32(s) // s is the exact sum: one rounding
	}
	return exactElemF32(vs, i, vals)
}

// exactElemF32 is element i of float32 inputs vs by TwoSum (or the slow
// path).
func exactElemF32(vs [][]float32, i int, vals []float64) float32 {
	s, c := float64(vs[0][i]), 0.0
	ok := s-s == 0
	for _, v := range vs[1:] {
		var good bool
		s, c, good = accumulate(s, c, float64(v[i]))
		ok = ok && good
	}
	if !ok {
		for _, v := range vs {
			vals = append(vals, float64(v[i]))
		}
		r, nan := exactSlow(vals, paramsF32)
		if nan {
			return math.Float32frombits(exactNaN32)
		}
		return float32(r)
	}
	h, l := s, 0.0
	if c != 0 {
		h, l = twoSum(s, c)
	}
	if l == 0 {
		return float32(h) // one rounding of the exact sum
	}
	return float32(roundTo(h, l, paramsF32))
}

// toOdd is s rounded to float32 toward the odd neighbour when inexact
// (round to odd): rounding that to a format of at most 22 bits of
// precision to nearest gives s rounded to it once (Boldo and Melquiond),
// so the 16-bit types round an exact float64 sum through float32 without
// double rounding. Overflow gives MaxFloat32 (odd), which rounds to Inf.
func toOdd(s float64) float32 {
	f := float32(s)
	if float64(f) == s {
		return f
	}
	b := math.Float32bits(f)
	if b&1 == 0 {
		if math.Abs(float64(f)) > math.Abs(s) {
			b--
		} else {
			b++
		}
	}
	return math.Float32frombits(b)
}

func exactF64(out []float64, ins [][]byte, vals []float64) {
	n := len(ins)
	vs := make([][]float64, n)
	for q := range ins {
		vs[q] = view[float64](ins[q])[:len(out)]
	}
	for i := range out {
		s, c := vs[0][i], 0.0
		ok := s-s == 0
		for q := 1; q < n; q++ {
			var good bool
			s, c, good = accumulate(s, c, vs[q][i])
			ok = ok && good
		}
		if !ok {
			for q := range vs {
				vals = append(vals, vs[q][i])
			}
			v, nan := exactSlow(vals, fmtParams{})
			vals = vals[:0]
			if nan {
				out[i] = math.Float64frombits(exactNaN64)
			} else {
				out[i] = v
			}
			continue
		}
		if c != 0 {
			s += c // one rounding of the exact sum s + c
		}
		out[i] = s
	}
}

func exactHalf(dt DType, out []uint16, ins [][]byte, vals []float64) {
	n := len(ins)
	vs := make([][]uint16, n)
	for q := range ins {
		vs[q] = view[uint16](ins[q])[:len(out)]
	}
	widen, narrow, p, nanBits := F16ToF32, F32ToF16, paramsF16, uint16(exactNaN16)
	if dt == BFloat16 {
		widen, narrow, p, nanBits = BF16ToF32, F32ToBF16, paramsBF16, exactNaNBF
	}
	// Float16: any sum of fewer than 2^13 inputs is exact (see the top of
	// this file); bfloat16: the exponent window, as for float32. An Inf
	// or NaN input makes s the NaN or the infinity the rules give.
	w, expShift, expMask := window(n, 7), 7, int32(0xff)
	if dt == Float16 {
		w, expShift, expMask = 1<<20, 10, 0x1f
		if n >= 1<<13 {
			w = -1
		}
	}
	for i := range out {
		emax, emin, s := int32(0), expMask, 0.0
		for q, v := range vs {
			b := v[i]
			e := int32(b>>expShift) & expMask
			emax = max(emax, e)
			if b&0x7fff != 0 {
				emin = min(emin, max(e, 1))
			}
			if q == 0 {
				s = float64(widen(b))
			} else {
				s += float64(widen(b))
			}
		}
		switch {
		case emax == expMask && s != s:
			out[i] = nanBits // a NaN, or +Inf and -Inf
			continue
		case emax == expMask:
			out[i] = narrow(float32(s)) // the infinity: no sum of 16-bit values overflows s
			continue
		case emax-emin <= w:
			out[i] = narrow(toOdd(s)) // s is the exact sum: one rounding
			continue
		}
		s, c := float64(widen(vs[0][i])), 0.0
		ok := s-s == 0
		for q := 1; q < n; q++ {
			var good bool
			s, c, good = accumulate(s, c, float64(widen(vs[q][i])))
			ok = ok && good
		}
		var v float64
		if ok {
			h, l := s, 0.0
			if c != 0 {
				h, l = twoSum(s, c)
			}
			v = roundTo(h, l, p)
		} else {
			for q := range vs {
				vals = append(vals, float64(widen(vs[q][i])))
			}
			var nan bool
			v, nan = exactSlow(vals, p)
			vals = vals[:0]
			if nan {
				out[i] = nanBits
				continue
			}
		}
		// v is a value of the type (or ±Inf): both conversions are exact.
		out[i] = narrow(float32(v))
	}
}

// exactPrec is enough bits for any sum of float64s to be exact in a
// big.Float: 2^1024 down to 2^-1074, plus 64 bits of carries.
const exactPrec = 1024 + 1074 + 64

// exactSlow is the correctly rounded sum of xs under p (the zero
// fmtParams for float64), by the rules of the special values above: it
// returns the value as a float64, or nan.
func exactSlow(xs []float64, p fmtParams) (v float64, nan bool) {
	pinf, ninf, negZeros := false, false, 0
	for _, x := range xs {
		switch {
		case x != x:
			return 0, true
		case math.IsInf(x, 1):
			pinf = true
		case math.IsInf(x, -1):
			ninf = true
		case x == 0 && math.Signbit(x):
			negZeros++
		}
	}
	switch {
	case pinf && ninf:
		return 0, true
	case pinf:
		return math.Inf(1), false
	case ninf:
		return math.Inf(-1), false
	case negZeros == len(xs):
		return math.Copysign(0, -1), false
	}
	var sum, x, rest big.Float
	sum.SetPrec(exactPrec)
	x.SetPrec(53)
	for _, f := range xs {
		sum.Add(&sum, x.SetFloat64(f))
	}
	if sum.Sign() == 0 {
		return 0, false
	}
	h, _ := sum.Float64() // nearest, ties to even, overflow to ±Inf
	if p.p == 0 || math.IsInf(h, 0) {
		return h, false
	}
	rest.SetPrec(exactPrec)
	rest.Sub(&sum, x.SetFloat64(h))
	return roundTo(h, float64(rest.Sign()), p), false
}

// roundTo rounds h + l, where h = RN64(h + l) and only l's sign matters,
// to the nearest value of the type p describes, ties to even, to ±Inf
// beyond its range. h must be finite; the result is exact in float64.
// (See the top of this file for why h and the sign of l suffice.)
func roundTo(h, l float64, p fmtParams) float64 {
	if h == 0 {
		// Only an exact zero sum: an inexact h is never 0.
		return h
	}
	a := math.Abs(h)
	_, e := math.Frexp(a) // a in [2^(e-1), 2^e)
	qe := max(e-1, p.emin) - (p.p - 1)
	t := math.Ldexp(a, -qe) // exact: a power-of-two scaling
	i := math.Floor(t)
	frac := t - i
	// ls > 0: the exact |sum| is above |h|.
	ls := l
	if h < 0 {
		ls = -l
	}
	if frac > 0.5 || frac == 0.5 && (ls > 0 || ls == 0 && math.Mod(i, 2) == 1) {
		i++
	}
	r := math.Ldexp(i, qe)
	if r >= math.Ldexp(1, p.emax+1) {
		r = math.Inf(1)
	}
	return math.Copysign(r, h)
}
