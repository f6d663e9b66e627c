package auth

import (
	"crypto/subtle"
	"encoding/binary"
	"math/bits"
)

// fe is an element of GF(2^255-19), Curve25519's field, in five limbs of
// 51 bits (radix 2^51), little end first; a limb may exceed 51 bits by a
// little between operations. Every operation below runs the same
// instructions and touches the same memory whatever the values: no branch,
// index or loop count depends on them (exponents are public constants), so
// its timing says nothing about the token the values come from. math/big,
// which the hash-to-curve used before, is variable-time throughout
// (normalised lengths, Euclid's inverse). Exponentiations follow a fixed
// addition chain.
type fe [5]uint64

const mask51 = 1<<51 - 1

// feFrom255 is the element of the low 255 bits of the 256-bit number w
// (64-bit words, least significant first) plus 19 times its top bit:
// w mod p, as 2^255 = 19 (mod p).
func feFrom255(w [4]uint64) fe {
	return fe{
		w[0]&mask51 + 19*(w[3]>>63),
		(w[0]>>51 | w[1]<<13) & mask51,
		(w[1]>>38 | w[2]<<26) & mask51,
		(w[2]>>25 | w[3]<<39) & mask51,
		(w[3] >> 12) & mask51,
	}
}

// feFromHash is the 64 bytes b, read as a big-endian number, mod p: its low
// and high 256 bits, lo + 38·hi, as 2^256 = 38 (mod p).
func feFromHash(b []byte) fe {
	var lo, hi [4]uint64
	for i := 0; i < 4; i++ {
		lo[i] = binary.BigEndian.Uint64(b[56-8*i:])
		hi[i] = binary.BigEndian.Uint64(b[24-8*i:])
	}
	l, h := feFrom255(lo), feFrom255(hi)
	return feAdd(l, feMul(h, fe{38}))
}

// carry brings every limb back to 51 bits and a little.
func (v fe) carry() fe {
	c0, c1, c2, c3, c4 := v[0]>>51, v[1]>>51, v[2]>>51, v[3]>>51, v[4]>>51
	return fe{v[0]&mask51 + 19*c4, v[1]&mask51 + c0, v[2]&mask51 + c1, v[3]&mask51 + c2, v[4]&mask51 + c3}
}

func feAdd(a, b fe) fe {
	return fe{a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4]}.carry()
}

// feSub is a - b, computed as a + 2p - b so that no limb goes below zero
// (b's limbs are carried, below 2p's).
func feSub(a, b fe) fe {
	return fe{a[0] + 0xFFFFFFFFFFFDA - b[0], a[1] + 0xFFFFFFFFFFFFE - b[1], a[2] + 0xFFFFFFFFFFFFE - b[2],
		a[3] + 0xFFFFFFFFFFFFE - b[3], a[4] + 0xFFFFFFFFFFFFE - b[4]}.carry()
}

// u128 is an unsigned 128-bit sum of limb products.
type u128 struct{ hi, lo uint64 }

func mulAdd(s u128, a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	lo, c := bits.Add64(s.lo, lo, 0)
	return u128{s.hi + hi + c, lo}
}

func (s u128) shr51() uint64 { return s.hi<<13 | s.lo>>51 }

// feMul is schoolbook multiplication with the limbs past 2^255 folded back
// times 19. With carried inputs each column is below 2^111, so its carry
// times 19 fits in 64 bits.
func feMul(a, b fe) fe {
	a1, a2, a3, a4 := 19*a[1], 19*a[2], 19*a[3], 19*a[4]
	var r0, r1, r2, r3, r4 u128
	r0 = mulAdd(mulAdd(mulAdd(mulAdd(mulAdd(r0, a[0], b[0]), a1, b[4]), a2, b[3]), a3, b[2]), a4, b[1])
	r1 = mulAdd(mulAdd(mulAdd(mulAdd(mulAdd(r1, a[0], b[1]), a[1], b[0]), a2, b[4]), a3, b[3]), a4, b[2])
	r2 = mulAdd(mulAdd(mulAdd(mulAdd(mulAdd(r2, a[0], b[2]), a[1], b[1]), a[2], b[0]), a3, b[4]), a4, b[3])
	r3 = mulAdd(mulAdd(mulAdd(mulAdd(mulAdd(r3, a[0], b[3]), a[1], b[2]), a[2], b[1]), a[3], b[0]), a4, b[4])
	r4 = mulAdd(mulAdd(mulAdd(mulAdd(mulAdd(r4, a[0], b[4]), a[1], b[3]), a[2], b[2]), a[3], b[1]), a[4], b[0])
	return fe{
		r0.lo&mask51 + 19*r4.shr51(),
		r1.lo&mask51 + r0.shr51(),
		r2.lo&mask51 + r1.shr51(),
		r3.lo&mask51 + r2.shr51(),
		r4.lo&mask51 + r3.shr51(),
	}.carry()
}

// feSquares is a^(2^n): n squarings, n public.
func feSquares(a fe, n int) fe {
	for i := 0; i < n; i++ {
		a = feMul(a, a)
	}
	return a
}

// chain250 is the addition chain Curve25519 implementations share (from
// ref10): z^(2^250-1), z^11 and z^2, in 249 squarings and 11 multiplies.
func chain250(z fe) (z2250, z11, z2 fe) {
	z2 = feMul(z, z)
	z9 := feMul(feSquares(z2, 2), z)
	z11 = feMul(z9, z2)
	z25 := feMul(feMul(z11, z11), z9)     // z^(2^5-1)
	z210 := feMul(feSquares(z25, 5), z25) // z^(2^10-1)
	z220 := feMul(feSquares(z210, 10), z210)
	z240 := feMul(feSquares(z220, 20), z220)
	z250 := feMul(feSquares(z240, 10), z210)
	z2100 := feMul(feSquares(z250, 50), z250)
	z2200 := feMul(feSquares(z2100, 100), z2100)
	z2250 = feMul(feSquares(z2200, 50), z250)
	return z2250, z11, z2
}

// feInvert is 1/z (0 for 0): z^(p-2) = z^(2^255-21), by Fermat.
func feInvert(z fe) fe {
	z2250, z11, _ := chain250(z)
	return feMul(feSquares(z2250, 5), z11)
}

// feLegendre is z^((p-1)/2) = z^(2^254-10), Euler's criterion: 1 for a
// nonzero square, 0 for 0, -1 for a non-square.
func feLegendre(z fe) fe {
	z2250, _, z2 := chain250(z)
	return feMul(feSquares(z2250, 4), feMul(z2, feMul(z2, z2)))
}

// bytes is v's canonical encoding, 32 bytes little-endian, fully reduced
// below p.
func (v fe) bytes() [32]byte {
	v = v.carry()
	// c is 1 exactly when v >= p, that is when v+19 reaches 2^255.
	c := (v[0] + 19) >> 51
	c = (v[1] + c) >> 51
	c = (v[2] + c) >> 51
	c = (v[3] + c) >> 51
	c = (v[4] + c) >> 51
	v[0] += 19 * c
	v[1] += v[0] >> 51
	v[0] &= mask51
	v[2] += v[1] >> 51
	v[1] &= mask51
	v[3] += v[2] >> 51
	v[2] &= mask51
	v[4] += v[3] >> 51
	v[3] &= mask51
	v[4] &= mask51 // drops 2^255, which the 19 added above stood for
	var out [32]byte
	binary.LittleEndian.PutUint64(out[0:], v[0]|v[1]<<51)
	binary.LittleEndian.PutUint64(out[8:], v[1]>>13|v[2]<<38)
	binary.LittleEndian.PutUint64(out[16:], v[2]>>26|v[3]<<25)
	binary.LittleEndian.PutUint64(out[24:], v[3]>>39|v[4]<<12)
	return out
}

// feEqual is 1 if a = b (mod p), else 0.
func feEqual(a, b fe) int {
	x, y := a.bytes(), b.bytes()
	return subtle.ConstantTimeCompare(x[:], y[:])
}

// feSelect is a if cond is 1, b if it is 0.
func feSelect(a, b fe, cond int) fe {
	m := -uint64(cond)
	var r fe
	for i := range r {
		r[i] = a[i]&m | b[i]&^m
	}
	return r
}
