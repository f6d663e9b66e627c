package reduce

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

func TestWide(t *testing.T) {
	for _, tc := range []struct {
		dt   DType
		op   Op
		want bool
	}{
		{Float16, Sum, true}, {Float16, Avg, true}, {Float16, Prod, true},
		{BFloat16, Sum, true}, {BFloat16, Avg, true}, {BFloat16, Prod, true},
		{Float16, Min, false}, {BFloat16, Max, false},
		{Float32, Sum, false}, {Float64, Sum, false}, {Uint16, Sum, false}, {Int16, Prod, false},
	} {
		if got := Wide(tc.dt, tc.op); got != tc.want {
			t.Errorf("Wide(%v, %v) = %v, want %v", tc.dt, tc.op, got, tc.want)
		}
	}
}

// wideInputs are 16-bit values of dt with the cases that matter: zeros of
// both signs, subnormals, the largest finite values, infinities and NaN,
// and random ones.
func wideInputs(dt DType, rng *rand.Rand, n int) []uint16 {
	special := []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3c00, 0x3c01}
	if dt == BFloat16 {
		special = []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x3f80, 0x3f81}
	}
	out := make([]uint16, n)
	for i := range out {
		if i < len(special) {
			out[i] = special[i]
			continue
		}
		f := float32(rng.NormFloat64() * 100)
		if dt == BFloat16 {
			out[i] = F32ToBF16(f)
		} else {
			out[i] = F32ToF16(f)
		}
	}
	return out
}

func to32(dt DType, h uint16) float32 {
	if dt == BFloat16 {
		return BF16ToF32(h)
	}
	return F16ToF32(h)
}

func to16(dt DType, f float32) uint16 {
	if dt == BFloat16 {
		return F32ToBF16(f)
	}
	return F32ToF16(f)
}

// sameF32 compares float32s bitwise, except that any NaN equals any NaN
// (which NaN an operation on two NaNs gives is not specified).
func sameF32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

func same16(dt DType, a, b uint16) bool {
	return a == b || to32(dt, a) != to32(dt, a) && to32(dt, b) != to32(dt, b)
}

// TestWideKernels checks every wide kernel against its definition, element
// by element, on aligned buffers (the typed loops) and on buffers one byte
// off (the encoding/binary fallback), with dst aliasing an input where the
// kernel allows it.
func TestWideKernels(t *testing.T) {
	const n = 300
	rng := rand.New(rand.NewSource(31))
	for _, dt := range []DType{Float16, BFloat16} {
		for _, op := range []Op{Sum, Prod, Avg} {
			a16, b16 := wideInputs(dt, rng, n), wideInputs(dt, rng, n)
			rng.Shuffle(n, func(i, j int) { b16[i], b16[j] = b16[j], b16[i] })
			a32 := make([]float32, n)
			for i := range a32 {
				a32[i] = float32(rng.NormFloat64() * 1000)
			}
			a32[0], a32[1] = float32(math.Inf(1)), float32(math.NaN())
			apply := func(x, y float32) float32 {
				if op == Prod {
					return x * y
				}
				return x + y
			}
			for _, shift := range []int{0, 1} {
				name := dt.String() + "/" + op.String()
				if shift != 0 {
					name += "/misaligned"
				}
				t.Run(name, func(t *testing.T) {
					h := func(v []uint16) []byte { // v as bytes, shift bytes into a fresh buffer
						b := make([]byte, 2*len(v)+shift)[shift:]
						for i, x := range v {
							binary.LittleEndian.PutUint16(b[2*i:], x)
						}
						return b
					}
					w := func(v []float32) []byte {
						b := make([]byte, 4*len(v)+shift)[shift:]
						for i, x := range v {
							binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
						}
						return b
					}
					get16 := func(b []byte, i int) uint16 { return binary.LittleEndian.Uint16(b[2*i:]) }
					get32 := func(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

					dst := w(make([]float32, n))
					ReduceWide(dt, op, dst, h(a16), h(b16))
					for i := 0; i < n; i++ {
						if want := apply(to32(dt, a16[i]), to32(dt, b16[i])); !sameF32(get32(dst, i), want) {
							t.Fatalf("ReduceWide element %d: %#04x op %#04x = %v, want %v", i, a16[i], b16[i], get32(dst, i), want)
						}
					}
					acc := w(a32) // dst aliases a32
					Accumulate(dt, op, acc, acc, h(b16))
					for i := 0; i < n; i++ {
						if want := apply(a32[i], to32(dt, b16[i])); !sameF32(get32(acc, i), want) {
							t.Fatalf("Accumulate element %d: %v op %#04x = %v, want %v", i, a32[i], b16[i], get32(acc, i), want)
						}
					}
					out := h(b16) // dst aliases b16
					AccumulateNarrow(dt, op, out, w(a32), out)
					for i := 0; i < n; i++ {
						if want := to16(dt, apply(a32[i], to32(dt, b16[i]))); !same16(dt, get16(out, i), want) {
							t.Fatalf("AccumulateNarrow element %d: %v op %#04x = %#04x, want %#04x", i, a32[i], b16[i], get16(out, i), want)
						}
					}
					wide := w(make([]float32, n))
					Widen(dt, wide, h(a16))
					back := h(make([]uint16, n))
					Narrow(dt, back, wide)
					for i := 0; i < n; i++ {
						if want := to32(dt, a16[i]); !sameF32(get32(wide, i), want) {
							t.Fatalf("Widen element %d: %#04x = %v, want %v", i, a16[i], get32(wide, i), want)
						}
						if !same16(dt, get16(back, i), a16[i]) {
							t.Fatalf("Narrow(Widen(%#04x)) = %#04x", a16[i], get16(back, i))
						}
					}
					narrowed := h(make([]uint16, n))
					Narrow(dt, narrowed, w(a32))
					for i := 0; i < n; i++ {
						if want := to16(dt, a32[i]); !same16(dt, get16(narrowed, i), want) {
							t.Fatalf("Narrow element %d: %v = %#04x, want %#04x", i, a32[i], get16(narrowed, i), want)
						}
					}
				})
			}
		}
	}
}

// TestWideOneRounding: the point of the wide kernels. Adding 2^-12 (a
// quarter of 1's ulp) to 1 three times in binary16 rounds each partial
// sum back to 1, while the float32 partial keeps 1 + 3·2^-12, which
// rounds once, up, to 1 + 2^-10.
func TestWideOneRounding(t *testing.T) {
	one, small := []byte{0x00, 0x3c}, []byte{0x00, 0x0c} // 1, 2^-12
	acc := make([]byte, 4)
	ReduceWide(Float16, Sum, acc, one, small)
	Accumulate(Float16, Sum, acc, acc, small)
	out := make([]byte, 2)
	AccumulateNarrow(Float16, Sum, out, acc, small)
	if got := binary.LittleEndian.Uint16(out); got != 0x3c01 {
		t.Errorf("1 + 3·2^-12 accumulated in float32: %#04x, want 0x3c01 (1 + 2^-10)", got)
	}
	old := append([]byte(nil), one...)
	for range 3 {
		Reduce(Float16, Sum, old, old, small)
	}
	if got := binary.LittleEndian.Uint16(old); got != 0x3c00 {
		t.Errorf("1 + 2^-12 + 2^-12 + 2^-12 rounded at each step: %#04x, want 0x3c00", got)
	}
}

func TestWidePanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"not wide", func() { ReduceWide(Float16, Max, make([]byte, 4), make([]byte, 2), make([]byte, 2)) }},
		{"float32", func() { Widen(Float32, make([]byte, 4), make([]byte, 2)) }},
		{"lengths", func() { Accumulate(BFloat16, Sum, make([]byte, 4), make([]byte, 4), make([]byte, 4)) }},
		{"odd", func() { Narrow(BFloat16, make([]byte, 3), make([]byte, 6)) }},
		{"dst", func() { AccumulateNarrow(Float16, Sum, make([]byte, 4), make([]byte, 4), make([]byte, 2)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			tc.f()
		})
	}
}
