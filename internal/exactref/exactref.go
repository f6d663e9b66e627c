// Package exactref is the reference the tests of ExactSum compare with:
// the exact sum of a few floating-point values computed in math/big and
// rounded once, to nearest with ties to even, by arithmetic of its own
// (not big.Float's conversions, nor the library's code), with the special
// values by the rules reduce.Exact documents. It also draws adversarial
// inputs. It is imported by tests only; it imports nothing of gocoll, so
// that internal/reduce's tests can use it.
package exactref

import (
	"math"
	"math/big"
	"math/rand"
)

// Format is an IEEE 754 binary format: exponent and stored mantissa bits.
type Format struct{ ExpBits, MantBits uint }

// The four float types of gocoll.
var (
	Float16  = Format{5, 10}
	BFloat16 = Format{8, 7}
	Float32  = Format{8, 23}
	Float64  = Format{11, 52}
)

func (f Format) bias() int        { return 1<<(f.ExpBits-1) - 1 }
func (f Format) expMask() uint64  { return 1<<f.ExpBits - 1 }
func (f Format) mantMask() uint64 { return 1<<f.MantBits - 1 }

// SignBit is the sign bit of f.
func (f Format) SignBit() uint64 { return 1 << (f.ExpBits + f.MantBits) }

// Inf is +Inf's bits.
func (f Format) Inf() uint64 { return f.expMask() << f.MantBits }

// NaN is the canonical NaN ExactSum returns: positive, quiet, no payload.
func (f Format) NaN() uint64 { return f.Inf() | 1<<(f.MantBits-1) }

// decode classifies bits: a NaN, an infinity (+1 or -1) or a finite value,
// set in v exactly.
func (f Format) decode(x uint64, v *big.Float) (nan bool, inf int) {
	e := x >> f.MantBits & f.expMask()
	m := x & f.mantMask()
	neg := x&f.SignBit() != 0
	if e == f.expMask() {
		if m != 0 {
			return true, 0
		}
		if neg {
			return false, -1
		}
		return false, 1
	}
	exp := int(e) - f.bias() - int(f.MantBits)
	if e == 0 {
		exp++ // subnormal: no implicit bit
	} else {
		m |= 1 << f.MantBits
	}
	v.SetInt64(int64(m))
	v.SetMantExp(v, exp)
	if neg {
		v.Neg(v)
	}
	return false, 0
}

// Sum is the correctly rounded sum of xs (bit patterns of f), by the
// ExactSum rules: NaN in or Inf - Inf gives NaN(); an infinity wins; an
// exact zero is -0 only if every input is -0.
func Sum(f Format, xs []uint64) uint64 {
	const prec = 4096
	sum := new(big.Float).SetPrec(prec)
	v := new(big.Float).SetPrec(prec)
	pinf, ninf, negZeros := false, false, 0
	for _, x := range xs {
		nan, inf := f.decode(x, v)
		switch {
		case nan:
			return f.NaN()
		case inf > 0:
			pinf = true
		case inf < 0:
			ninf = true
		default:
			if x == f.SignBit() {
				negZeros++
			}
			sum.Add(sum, v)
		}
	}
	switch {
	case pinf && ninf:
		return f.NaN()
	case pinf:
		return f.Inf()
	case ninf:
		return f.Inf() | f.SignBit()
	case negZeros == len(xs):
		return f.SignBit()
	case sum.Sign() == 0:
		return 0
	}
	var sign uint64
	if sum.Sign() < 0 {
		sign = f.SignBit()
	}
	a := new(big.Float).SetPrec(prec).Abs(sum)
	// a = mant * 2^exp with mant in [0.5, 1): a in [2^(exp-1), 2^exp).
	exp := a.MantExp(nil)
	p := int(f.MantBits) + 1
	emin := 1 - f.bias()
	qe := max(exp-1, emin) - (p - 1) // the spacing of f's values near a
	scaled := new(big.Float).SetPrec(prec).SetMantExp(a, -qe)
	i, _ := scaled.Int(nil) // truncates
	frac := new(big.Float).SetPrec(prec).Sub(scaled, new(big.Float).SetInt(i))
	switch c := frac.Cmp(big.NewFloat(0.5)); {
	case c > 0, c == 0 && i.Bit(0) == 1:
		i.Add(i, big.NewInt(1))
	}
	// value = i * 2^qe; encode, carrying into the exponent.
	if i.Sign() == 0 {
		return sign
	}
	for i.BitLen() > p {
		// Only i = 2^p after a carry: one more binade.
		i.Rsh(i, 1)
		qe++
	}
	m := i.Uint64()
	if m < 1<<(p-1) {
		// Subnormal (qe is the subnormal spacing): biased exponent 0.
		return sign | m
	}
	be := qe + (p - 1) + f.bias()
	if be >= int(f.expMask()) {
		return sign | f.Inf()
	}
	return sign | uint64(be)<<f.MantBits | m&f.mantMask()
}

// Adversarial draws bits of f to hit what an exact sum gets wrong:
// exponents over the whole range, subnormals, a value cancelling one of
// prev (the element's earlier inputs), a value half an ulp (or a few
// ulps) of one of prev, values of few bits at the range's ends, and
// sometimes Inf, NaN or a zero.
func Adversarial(rng *rand.Rand, f Format, prev []uint64) uint64 {
	sign := uint64(rng.Intn(2)) * f.SignBit()
	maxExp := f.expMask() - 1
	switch k := rng.Intn(20); {
	case k < 6:
		return sign | uint64(rng.Int63n(int64(maxExp+1)))<<f.MantBits | uint64(rng.Int63())&f.mantMask()
	case k < 8:
		return sign | uint64(rng.Int63())&f.mantMask()
	case k < 11 && len(prev) > 0:
		return prev[rng.Intn(len(prev))] ^ f.SignBit()
	case k < 14 && len(prev) > 0:
		p := prev[rng.Intn(len(prev))]
		e := p >> f.MantBits & f.expMask()
		shift := uint64(1 + rng.Intn(3))
		if e == 0 || e == f.expMask() || e <= uint64(f.MantBits)+shift {
			return sign | 1
		}
		return sign | (e-uint64(f.MantBits)-shift)<<f.MantBits
	case k < 16:
		e := uint64(rng.Intn(4))
		if rng.Intn(2) == 0 {
			e = maxExp - e
		}
		return sign | e<<f.MantBits | uint64(rng.Intn(4))<<(f.MantBits-2)
	case k == 16:
		return uint64(rng.Int63()) & (f.SignBit()<<1 - 1)
	case k == 17:
		return sign | f.Inf()
	default:
		return sign
	}
}

// Value is the value of bits x of f as a float64 (NaN for a NaN), for
// messages.
func Value(f Format, x uint64) float64 {
	v := new(big.Float)
	nan, inf := f.decode(x, v)
	switch {
	case nan:
		return math.NaN()
	case inf != 0:
		return math.Inf(inf)
	}
	r, _ := v.Float64()
	return r
}

// Ordinary draws bits of f for an ordinary finite value: any sign and
// mantissa, an exponent within 2^±8 of 1. Its sums are cheap for Sum
// above, which adversarial ones are not.
func Ordinary(rng *rand.Rand, f Format) uint64 {
	sign := uint64(rng.Intn(2)) * f.SignBit()
	e := uint64(f.bias() + rng.Intn(17) - 8)
	return sign | e<<f.MantBits | uint64(rng.Int63())&f.mantMask()
}
