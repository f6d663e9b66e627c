package auth

import (
	"bytes"
	"crypto/rand"
	"math/big"
	"testing"
)

// p is Curve25519's field prime, for the math/big references below.
var p = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))

// feBig is v as a number below p, through its canonical encoding.
func feBig(v fe) *big.Int {
	b := v.bytes()
	be := make([]byte, 32)
	for i := range b {
		be[31-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}

// feOf is x mod p as an element (a hash of x's 64 big-endian bytes).
func feOf(x *big.Int) fe {
	b := make([]byte, 64)
	new(big.Int).Mod(x, p).FillBytes(b)
	return feFromHash(b)
}

// TestFieldAgainstBig checks the constant-time field arithmetic against
// math/big on random elements and the edges: 0, 1, p-1, and encodings at
// or past p that must reduce.
func TestFieldAgainstBig(t *testing.T) {
	vals := []*big.Int{big.NewInt(0), big.NewInt(1), big.NewInt(2), big.NewInt(19), new(big.Int).Sub(p, big.NewInt(1)),
		new(big.Int).Sub(p, big.NewInt(2)), new(big.Int).Lsh(big.NewInt(1), 254), new(big.Int).Lsh(big.NewInt(1), 51)}
	for i := 0; i < 200; i++ {
		b := make([]byte, 32)
		rand.Read(b)
		vals = append(vals, new(big.Int).Mod(new(big.Int).SetBytes(b), p))
	}
	mod := func(x *big.Int) *big.Int { return x.Mod(x, p) }
	for i, a := range vals {
		b := vals[(i*7+3)%len(vals)]
		fa, fb := feOf(a), feOf(b)
		checks := []struct {
			what      string
			got, want *big.Int
		}{
			{"a", feBig(fa), a},
			{"a+b", feBig(feAdd(fa, fb)), mod(new(big.Int).Add(a, b))},
			{"a-b", feBig(feSub(fa, fb)), mod(new(big.Int).Sub(a, b))},
			{"a*b", feBig(feMul(fa, fb)), mod(new(big.Int).Mul(a, b))},
			{"a*a*a", feBig(feMul(feMul(fa, fa), fa)), mod(new(big.Int).Exp(a, big.NewInt(3), p))},
			{"1/a", feBig(feInvert(fa)), new(big.Int).Exp(a, new(big.Int).Sub(p, big.NewInt(2)), p)},
			{"legendre", feBig(feLegendre(fa)), new(big.Int).Exp(a, new(big.Int).Rsh(p, 1), p)},
		}
		for _, c := range checks {
			if c.got.Cmp(c.want) != 0 {
				t.Fatalf("a=%x b=%x: %s = %x, want %x", a, b, c.what, c.got, c.want)
			}
		}
		if a.Sign() != 0 && feBig(feMul(fa, feInvert(fa))).Cmp(big.NewInt(1)) != 0 {
			t.Fatalf("a=%x: a * 1/a is not 1", a)
		}
		if eq := feEqual(fa, fb); eq != map[bool]int{true: 1, false: 0}[a.Cmp(b) == 0] {
			t.Fatalf("a=%x b=%x: equal says %d", a, b, eq)
		}
		if s := feSelect(fa, fb, 1); feBig(s).Cmp(a) != 0 {
			t.Fatalf("select 1 gave %x, want %x", feBig(s), a)
		}
		if s := feSelect(fa, fb, 0); feBig(s).Cmp(b) != 0 {
			t.Fatalf("select 0 gave %x, want %x", feBig(s), b)
		}
	}
	// Limbs that spell p, p+5 and 2^255-1 encode reduced.
	for _, c := range []struct {
		limbs fe
		want  int64
	}{
		{fe{mask51 - 18, mask51, mask51, mask51, mask51}, 0},
		{fe{mask51 - 13, mask51, mask51, mask51, mask51}, 5},
		{fe{mask51, mask51, mask51, mask51, mask51}, 18},
	} {
		if got := feBig(c.limbs); got.Cmp(big.NewInt(c.want)) != 0 {
			t.Errorf("limbs %x encode %x, want %d", c.limbs, got, c.want)
		}
	}
	// A 512-bit hash, all ones and at random, reduces as math/big does.
	for i := 0; i < 100; i++ {
		h := bytes.Repeat([]byte{0xff}, 64)
		if i > 0 {
			rand.Read(h)
		}
		if got, want := feBig(feFromHash(h)), mod(new(big.Int).SetBytes(h)); got.Cmp(want) != 0 {
			t.Fatalf("hash %x: %x, want %x", h, got, want)
		}
	}
}

// generatorBig is the hash-to-curve as it was written with math/big
// (variable-time), kept as the reference the constant-time one must match
// bit for bit: both ends of a handshake must find the same point.
// flipped says whether x1 was not the answer (x1³+Ax1²+x1 a non-square).
func generatorBig(token []byte, svc Service) (u []byte, flipped bool) {
	montA := big.NewInt(486662)
	r := new(big.Int).SetBytes(generatorHash(token, svc))
	r.Mod(r, p)
	den := new(big.Int).Mul(r, r)
	den.Lsh(den, 1).Add(den, big.NewInt(1)).Mod(den, p)
	x := new(big.Int).Neg(montA)
	if den.Sign() != 0 {
		x.Mul(x, new(big.Int).ModInverse(den, p))
	}
	x.Mod(x, p)
	gx := new(big.Int).Add(x, montA)
	gx.Mul(gx, x).Add(gx, big.NewInt(1)).Mul(gx, x).Mod(gx, p)
	if e := new(big.Int).Exp(gx, new(big.Int).Rsh(p, 1), p); e.Cmp(big.NewInt(1)) != 0 && gx.Sign() != 0 {
		x.Neg(x).Sub(x, montA).Mod(x, p)
		flipped = true
	}
	u = make([]byte, 32)
	x.FillBytes(u)
	for i := 0; i < 16; i++ {
		u[i], u[31-i] = u[31-i], u[i]
	}
	return u, flipped
}

// TestGeneratorMatchesReference: the constant-time hash-to-curve finds the
// same point as the math/big reference for every token tried (short, long,
// empty, random) and every service, and both branches of Elligator 2 (the
// square and the non-square case) are among them.
func TestGeneratorMatchesReference(t *testing.T) {
	tokens := [][]byte{nil, []byte("hunter2"), []byte("0123456789abcdef"), bytes.Repeat([]byte("x"), 300)}
	for i := 0; i < 500; i++ {
		b := make([]byte, 1+i%64)
		rand.Read(b)
		tokens = append(tokens, b)
	}
	flipped := map[bool]int{}
	for _, tok := range tokens {
		for _, svc := range []Service{Store, Mesh, Join, QueuePair} {
			g, err := generator(tok, svc)
			if err != nil {
				t.Fatal(err)
			}
			want, flip := generatorBig(tok, svc)
			if !bytes.Equal(g.Bytes(), want) {
				t.Fatalf("token %x, %v: %x, want %x", tok, svc, g.Bytes(), want)
			}
			flipped[flip]++
		}
	}
	if flipped[true] == 0 || flipped[false] == 0 {
		t.Fatalf("Elligator's branches taken: %v; want both", flipped)
	}
}
