package reduce

import "math"

// Conversions between float32 and the 16-bit formats.
//
// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
// bfloat16: 1 sign bit, 8 exponent bits (bias 127), 7 mantissa bits; the
// upper half of a float32.
//
// All four conversions are call-free and small enough for the compiler to
// inline them into the reduction loops (F32ToF16 is just under the inlining
// budget; keep it that way when editing).

const (
	f16ExpMask  = 0x7c00
	f16Inf      = 0x7c00
	f16QuietBit = 0x0200

	f32ExpMask  = 0x7f800000
	f32QuietBit = 0x00400000

	// Exponent bias difference between float32 (127) and binary16 (15),
	// positioned at the float32 exponent field.
	f16Rebias = (127 - 15) << 23
)

// F16ToF32 converts an IEEE 754 binary16 value to float32. The conversion is
// exact; a NaN is returned as a quiet NaN.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	em := uint32(h & 0x7fff) // exponent and mantissa
	if em < 0x0400 {
		// Zero or subnormal: em * 2^-24, exact in float32 (em < 2^10 and a
		// non-zero product is at least 2^-24, a normal float32).
		return math.Float32frombits(sign | math.Float32bits(float32(em)*0x1p-24))
	}
	// Normal: move exponent and mantissa into place and rebias.
	r := em<<13 + f16Rebias
	if em >= f16ExpMask {
		// Inf or NaN: the exponent becomes 255 after a second rebias.
		r += f16Rebias
		if em != f16ExpMask {
			r |= f32QuietBit
		}
	}
	return math.Float32frombits(sign | r)
}

// F32ToF16 converts a float32 to IEEE 754 binary16, rounding to nearest with
// ties to even. Values too large overflow to ±Inf, values too small become
// subnormals or ±0, NaN becomes a quiet NaN (the payload is not kept) and -0
// stays -0.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	var r uint32
	if a < 113<<23 {
		// |f| < 2^-14: the result is a binary16 subnormal or zero. Adding
		// 0.5 in float32 rounds |f| to a multiple of 2^-24 (the ulp of
		// float32 in [0.5, 1), and the binary16 subnormal step), to nearest
		// with ties to even; the low mantissa bits of the sum are that
		// multiple. A result of 0x400 is the smallest normal, correctly
		// encoded.
		r = math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	} else {
		// Normal binary16 range: rebias and round to nearest even on the
		// 13 dropped bits. A carry propagates into the exponent, and from
		// the top binade (|f| >= 65520) to Inf. Clamping at 2^16 first
		// turns every larger value, and Inf, into exactly Inf.
		r = min(a, 143<<23) - f16Rebias
		r = (r + 0x0fff + (r>>13)&1) >> 13
		if a > f32ExpMask {
			r = f16Inf | f16QuietBit // NaN
		}
	}
	return uint16(b>>16)&0x8000 | uint16(r)
}

// BF16ToF32 converts a bfloat16 value to float32. The conversion is exact; a
// NaN is returned as a quiet NaN.
func BF16ToF32(h uint16) float32 {
	if h&0x7fff > 0x7f80 {
		h |= 0x0040 // NaN: set the quiet bit
	}
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 converts a float32 to bfloat16, rounding to nearest with ties to
// even. Values too large overflow to ±Inf, NaN becomes a quiet NaN,
// subnormals are rounded exactly and -0 stays -0.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > f32ExpMask {
		return uint16(b>>16) | 0x0040 // NaN: truncate and quiet (keeps it a NaN)
	}
	// Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry
	// propagates into the exponent and, past the largest finite value, to Inf.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
