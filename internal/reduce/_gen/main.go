// Command _gen writes the amd64 reduction kernels: reduce_amd64.s and the
// matching Go declarations and kernel table in kernels_amd64.go. Run it with
// `go generate` in internal/reduce (see the go:generate line in simd.go).
//
// It is a plain text generator with no dependencies: each kernel is a loop
// over "lanes" (one vector of output each), unrolled as far as the vector
// registers allow, with the per-element operation written once in a
// three-operand form and lowered to destructive two-operand SSE2 code where
// needed. Lengths that are not a multiple of the block are finished by the
// Go code that calls the kernel.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"strings"
)

type isa struct {
	name  string // kernel name suffix and level
	level string // Go constant of the level
	reg   string // register prefix: X, Y or Z
	vs    int    // vector size in bytes
	nregs int
	vex   bool // three-operand VEX/EVEX forms
	evex  bool // AVX-512 (mask registers, 32 registers)
}

var isas = []*isa{
	{"SSE2", "levelSSE2", "X", 16, 16, false, false},
	{"AVX2", "levelAVX2", "Y", 32, 16, true, false},
	// AVX-512 instructions (masks, 64-bit multiply and min/max, 32
	// registers) on 256-bit vectors (AVX-512VL): with 512-bit vectors the
	// 64 MiB float32 sum streamed about 9% slower on the AMD EPYC (Zen 4)
	// this was measured on (best pass 20.9 against 22.8 GB/s), and in cache
	// they were no faster.
	{"AVX512", "levelAVX512", "Y", 32, 32, true, true},
}

var dtypes = []struct{ short, goName string }{
	{"F32", "Float32"}, {"F64", "Float64"},
	{"I8", "Int8"}, {"I16", "Int16"}, {"I32", "Int32"}, {"I64", "Int64"},
	{"U8", "Uint8"}, {"U16", "Uint16"}, {"U32", "Uint32"}, {"U64", "Uint64"},
	{"F16", "Float16"}, {"BF16", "BFloat16"},
}

var ops = []struct{ short, goName string }{
	{"sum", "Sum"}, {"prod", "Prod"}, {"min", "Min"}, {"max", "Max"},
	{"div", "opScale"}, // Scale: d = a / divisor, only for float types
}

// body collects the instructions of one lane. Lane registers are written as
// placeholders {rN} and constants as {cN}; they are assigned afterwards.
type body struct {
	isa    *isa
	lines  []string
	nr     int      // lane registers used
	consts []uint64 // 64-bit broadcast patterns
	feat   string   // extra CPU feature: "" or "featF16C"
	div    string   // "ps" or "pd" when the kernel divides by a broadcast scalar
}

// operand returns the lane's second operand: loaded from b's stream, or,
// for division (Scale), the divisor broadcast once into register {d}.
func (b *body) operand(mem string, s string, load func(mem, dst string)) string {
	if b.div == "" {
		y := b.r(1)
		load(mem, y)
		return y
	}
	b.div = s
	b.r(1) // keep the register layout of the other kernels
	return "{d}"
}

func (b *body) r(i int) string {
	if i+1 > b.nr {
		b.nr = i + 1
	}
	return fmt.Sprintf("{r%d}", i)
}

func (b *body) c(v uint64) string {
	for i, x := range b.consts {
		if x == v {
			return fmt.Sprintf("{c%d}", i)
		}
	}
	b.consts = append(b.consts, v)
	return fmt.Sprintf("{c%d}", len(b.consts)-1)
}

func c32(v uint32) uint64 { return uint64(v) | uint64(v)<<32 }
func c16(v uint16) uint64 { return c32(uint32(v) | uint32(v)<<16) }
func c8(v uint8) uint64   { return c16(uint16(v) | uint16(v)<<8) }

func (b *body) raw(format string, args ...any) {
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
}

var sseNames = map[string]string{
	"addps": "ADDPS", "addpd": "ADDPD", "divps": "DIVPS", "divpd": "DIVPD", "mulps": "MULPS", "mulpd": "MULPD",
	"minps": "MINPS", "maxps": "MAXPS", "minpd": "MINPD", "maxpd": "MAXPD",
	"and": "PAND", "or": "POR", "andn": "PANDN", "xor": "PXOR",
	"paddb": "PADDB", "paddw": "PADDW", "paddd": "PADDL", "paddq": "PADDQ",
	"pmullw": "PMULLW", "pmuludq": "PMULULQ",
	"pminub": "PMINUB", "pmaxub": "PMAXUB", "pminsw": "PMINSW", "pmaxsw": "PMAXSW",
	"pcmpgtd": "PCMPGTL",
	"psrlw":   "PSRLW", "psrld": "PSRLL", "psrlq": "PSRLQ", "psllw": "PSLLW", "pslld": "PSLLL", "psllq": "PSLLQ", "psrad": "PSRAL",
	"packssdw": "PACKSSLW", "punpcklwd": "PUNPCKLWL", "punpckhwd": "PUNPCKHWL",
}

var commutative = map[string]bool{
	"addps": true, "addpd": true, "mulps": true, "mulpd": true, "and": true, "or": true, "xor": true,
	"paddb": true, "paddw": true, "paddd": true, "paddq": true, "pmullw": true, "pmulld": true, "pmullq": true, "pmuludq": true,
}

func (b *body) mnemonic(name string) string {
	switch {
	case !b.isa.vex:
		m, ok := sseNames[name]
		if !ok {
			log.Fatalf("no SSE2 instruction for %s", name)
		}
		return m
	case b.isa.evex && (name == "and" || name == "or" || name == "andn" || name == "xor"):
		return "VP" + strings.ToUpper(name) + "D"
	case name == "and" || name == "or" || name == "andn" || name == "xor":
		return "VP" + strings.ToUpper(name)
	}
	return "V" + strings.ToUpper(name)
}

// op emits dst = src1 OP src in Go operand order (VEX "OP src, src1, dst").
func (b *body) op(name, src, src1, dst string) {
	m := b.mnemonic(name)
	if b.isa.vex {
		b.raw("%s %s, %s, %s", m, src, src1, dst)
		return
	}
	switch {
	case dst == src1:
	case dst == src && commutative[name]:
		src = src1
	case dst == src:
		log.Fatalf("SSE lowering of %s %s, %s, %s clobbers a source", name, src, src1, dst)
	default:
		b.raw("MOVO %s, %s", src1, dst)
	}
	b.raw("%s %s, %s", m, src, dst)
}

// sh emits dst = src shifted by imm.
func (b *body) sh(name string, imm int, src, dst string) {
	m := b.mnemonic(name)
	if b.isa.vex {
		b.raw("%s $%d, %s, %s", m, imm, src, dst)
		return
	}
	if src != dst {
		b.raw("MOVO %s, %s", src, dst)
	}
	b.raw("%s $%d, %s", m, imm, dst)
}

func (b *body) mov(src, dst string) {
	switch {
	case !b.isa.vex:
		b.raw("MOVO %s, %s", src, dst)
	case b.isa.evex:
		b.raw("VMOVDQA64 %s, %s", src, dst)
	default:
		b.raw("VMOVDQA %s, %s", src, dst)
	}
}

func (b *body) load(mem, dst string) {
	switch {
	case !b.isa.vex:
		b.raw("MOVOU %s, %s", mem, dst)
	case b.isa.evex:
		b.raw("VMOVDQU64 %s, %s", mem, dst)
	default:
		b.raw("VMOVDQU %s, %s", mem, dst)
	}
}

func (b *body) store(src, mem string) {
	switch {
	case !b.isa.vex:
		b.raw("MOVOU %s, %s", src, mem)
	case b.isa.evex:
		b.raw("VMOVDQU64 %s, %s", src, mem)
	default:
		b.raw("VMOVDQU %s, %s", src, mem)
	}
}

// fop emits x = x op y on packed floats (s is "ps" or "pd"), matching Go's
// builtin min and max: NaN if either operand is NaN, -0 below +0.
//
// MINPS/MAXPS return their second source when either operand is NaN or both
// are zeros, so the operation is done both ways round: for min, OR of the two
// results gives NaN if either is NaN (exponent all ones, mantissa non-zero
// survive an OR) and -0 for a pair of zeros; for max, AND gives +0 for a pair
// of zeros, and the NaN lanes, found by an unordered compare, are then forced
// to NaN.
func (b *body) fop(op, s, x, y string, t []string) {
	S := strings.ToUpper(s)
	switch op {
	case "sum":
		b.op("add"+s, y, x, x)
	case "prod":
		b.op("mul"+s, y, x, x)
	case "div":
		b.op("div"+s, y, x, x)
	case "min":
		b.op("min"+s, x, y, t[0])
		b.op("min"+s, y, x, x)
		b.op("or", t[0], x, x)
	case "max":
		if b.isa.evex {
			b.raw("VCMP%s $3, %s, %s, K1", S, y, x)
			b.op("max"+s, x, y, t[0])
			b.op("max"+s, y, x, t[1])
			b.op("and", t[0], t[1], t[1])
			b.raw("VADD%s %s, %s, K1, %s", S, y, x, t[1]) // NaN lanes: x+y is NaN
			b.mov(t[1], x)
			return
		}
		if b.isa.vex {
			b.raw("VCMP%s $3, %s, %s, %s", S, y, x, t[1])
		} else {
			b.mov(x, t[1])
			b.raw("CMP%s %s, %s, $3", S, y, t[1])
		}
		b.op("max"+s, x, y, t[0])
		b.op("max"+s, y, x, x)
		b.op("and", t[0], x, x)
		b.op("or", t[1], x, x) // all ones in NaN lanes: a NaN
	}
}

// iop emits x = x op y on packed integers of the given width ("b", "w",
// "d", "q"); it returns false when the ISA has no reasonable sequence (the
// Go loop is used then).
func (b *body) iop(op, w string, signed bool, x, y string, t []string) bool {
	sse, evex := !b.isa.vex, b.isa.evex
	su := "u"
	if signed {
		su = "s"
	}
	switch op {
	case "sum":
		b.op("padd"+w, y, x, x)
		return true
	case "prod":
		switch {
		case w == "w":
			b.op("pmullw", y, x, x)
		case w == "d" && !sse:
			b.op("pmulld", y, x, x)
		case w == "q" && evex:
			b.op("pmullq", y, x, x)
		case w == "b":
			// Low byte of each 16-bit product is the product of the low
			// bytes; the high bytes are multiplied separately.
			b.op("pmullw", y, x, t[0])
			b.sh("psllw", 8, t[0], t[0])
			b.sh("psrlw", 8, t[0], t[0])
			b.sh("psrlw", 8, x, t[1])
			b.sh("psrlw", 8, y, t[2])
			b.op("pmullw", t[2], t[1], t[1])
			b.sh("psllw", 8, t[1], t[1])
			b.op("or", t[0], t[1], x)
		case w == "d": // SSE2: PMULUDQ on even and odd lanes
			b.op("pmuludq", y, x, t[0])
			b.sh("psrlq", 32, x, t[1])
			b.sh("psrlq", 32, y, t[2])
			b.op("pmuludq", t[2], t[1], t[1])
			b.sh("psllq", 32, t[0], t[0])
			b.sh("psrlq", 32, t[0], t[0])
			b.sh("psllq", 32, t[1], t[1])
			b.op("or", t[0], t[1], x)
		case w == "q": // lo*lo + (hi*lo + lo*hi) << 32, mod 2^64
			b.op("pmuludq", y, x, t[0])
			b.sh("psrlq", 32, x, t[1])
			b.op("pmuludq", y, t[1], t[1])
			b.sh("psrlq", 32, y, t[2])
			b.op("pmuludq", x, t[2], t[2])
			b.op("paddq", t[2], t[1], t[1])
			b.sh("psllq", 32, t[1], t[1])
			b.op("paddq", t[1], t[0], x)
		}
		return true
	}
	// min, max
	native := evex || (b.isa.vex && w != "q") || (w == "b" && !signed) || (w == "w" && signed)
	if native {
		b.op("p"+op+su+w, y, x, x)
		return true
	}
	switch {
	case sse && (w == "b" || w == "w"):
		// Flip the sign bit to use the instruction of the other signedness.
		var c string
		if w == "b" {
			c = b.c(c8(0x80))
		} else {
			c = b.c(c16(0x8000))
		}
		alt := "p" + op + "s" + w
		if w == "b" {
			alt = "p" + op + "u" + w
		}
		b.op("xor", c, x, t[0])
		b.op("xor", c, y, t[1])
		b.op(alt, t[1], t[0], t[0])
		b.op("xor", c, t[0], x)
		return true
	case sse && w == "d", !sse && w == "q":
		// m = x > y (signed compare, after flipping sign bits for
		// unsigned), then select.
		gt := "pcmpgt" + w
		m := t[0]
		if signed {
			b.op(gt, y, x, m)
		} else {
			var c string
			if w == "d" {
				c = b.c(c32(0x80000000))
			} else {
				c = b.c(0x8000000000000000)
			}
			b.op("xor", c, x, m)
			b.op("xor", c, y, t[1])
			b.op(gt, t[1], m, m)
		}
		ifSet, ifClear := y, x // min: y where x > y
		if op == "max" {
			ifSet, ifClear = x, y
		}
		if b.isa.vex {
			b.raw("VPBLENDVB %s, %s, %s, %s", m, ifSet, ifClear, x)
			return true
		}
		b.op("andn", ifClear, m, t[1]) // ^m & ifClear
		b.op("and", ifSet, m, m)
		b.op("or", t[1], m, x)
		return true
	}
	return false
}

var widths = map[string]string{"8": "b", "16": "w", "32": "d", "64": "q"}

// lane emits one lane of kernel (dt, op) at byte offset off; it returns the
// block size (bytes of output per lane) or 0 if there is no kernel.
func (b *body) lane(dt, op string, off int) int {
	x, y := b.r(0), b.r(1)
	mem := func(reg string, o int) string { return fmt.Sprintf("%d(%s)", off+o, reg) }
	switch dt {
	case "F32", "F64":
		s := "ps"
		if dt == "F64" {
			s = "pd"
		}
		b.load(mem("SI", 0), x)
		y = b.operand(mem("DX", 0), s, b.load)
		b.fop(op, s, x, y, []string{b.r(2), b.r(3)})
		b.store(x, mem("DI", 0))
		return b.isa.vs
	case "F16":
		if !b.isa.vex {
			return 0
		}
		if !b.isa.evex {
			b.feat = "featF16C"
		}
		half := b.isa.vs / 2
		b.raw("VCVTPH2PS %s, %s", mem("SI", 0), x)
		y = b.operand(mem("DX", 0), "ps", func(m, r string) { b.raw("VCVTPH2PS %s, %s", m, r) })
		b.fop(op, "ps", x, y, []string{b.r(2), b.r(3)})
		b.raw("VCVTPS2PH $0, %s, %s", x, mem("DI", 0)) // imm 0: round to nearest even
		return half
	case "BF16":
		return b.bf16Lane(op, off)
	}
	w := widths[strings.TrimLeft(dt, "IU")]
	b.load(mem("SI", 0), x)
	b.load(mem("DX", 0), y)
	if !b.iop(op, w, dt[0] == 'I', x, y, []string{b.r(2), b.r(3), b.r(4)}) {
		return 0
	}
	b.store(x, mem("DI", 0))
	return b.isa.vs
}

// bf16Lane widens bfloat16 to float32 by shifting into the upper half,
// operates in float32 and rounds back to nearest even with integer
// arithmetic (add 0x7fff plus the lowest kept bit), quieting NaNs, exactly as
// F32ToBF16 does. (AVX-512 BF16's VCVTNEPS2BF16 is not used: it treats
// subnormal inputs as zero, which F32ToBF16 does not.)
func (b *body) bf16Lane(op string, off int) int {
	mem := func(reg string, o int) string { return fmt.Sprintf("%d(%s)", off+o, reg) }
	one, bias, abs, inf, quiet := b.c(c32(1)), b.c(c32(0x7fff)), b.c(c32(0x7fffffff)), b.c(c32(0x7f800000)), b.c(c32(0x00400000))
	if b.isa.evex {
		x, y := b.r(0), b.r(1)
		t, u := b.r(2), b.r(3)
		b.raw("VPMOVZXWD %s, %s", mem("SI", 0), x)
		b.sh("pslld", 16, x, x)
		y = b.operand(mem("DX", 0), "ps", func(m, r string) {
			b.raw("VPMOVZXWD %s, %s", m, r)
			b.sh("pslld", 16, r, r)
		})
		b.fop(op, "ps", x, y, []string{t, u})
		b.sh("psrld", 16, x, t)
		b.op("and", one, t, t)
		b.op("paddd", x, t, t)
		b.op("paddd", bias, t, t)
		b.op("and", abs, x, u)
		b.raw("VPCMPGTD %s, %s, K2", inf, u)
		b.raw("VPORD %s, %s, K2, %s", quiet, x, t) // NaN lanes: truncate, quiet
		b.sh("psrld", 16, t, t)
		b.raw("VPMOVDW %s, %s", t, mem("DI", 0))
		return b.isa.vs / 2
	}
	// SSE2 and AVX2: two float32 vectors per lane, packed back together.
	x0, y0, x1, y1 := b.r(0), b.r(1), b.r(2), b.r(3)
	t, u := b.r(4), b.r(5)
	step := b.isa.vs / 2 // input bytes per float32 vector
	widen := func(reg string, lo, hi string) {
		if b.isa.vex {
			b.raw("VPMOVZXWD %s, %s", mem(reg, 0), lo)
			b.raw("VPMOVZXWD %s, %s", mem(reg, step), hi)
			b.sh("pslld", 16, lo, lo)
			b.sh("pslld", 16, hi, hi)
			return
		}
		zero := b.c(0)
		b.load(mem(reg, 0), t)
		b.op("punpcklwd", t, zero, lo)
		b.op("punpckhwd", t, zero, hi)
	}
	widen("SI", x0, x1)
	if b.div != "" {
		b.div = "ps"
		y0, y1 = "{d}", "{d}"
	} else {
		widen("DX", y0, y1)
	}
	for _, p := range [][2]string{{x0, y0}, {x1, y1}} {
		x, y := p[0], p[1]
		b.fop(op, "ps", x, y, []string{t, u})
		b.sh("psrld", 16, x, t)
		b.op("and", one, t, t)
		b.op("paddd", x, t, t)
		b.op("paddd", bias, t, t)
		b.op("and", abs, x, u)
		b.op("pcmpgtd", inf, u, u) // u = |x| > Inf: NaN
		b.op("or", quiet, x, x)
		if b.isa.vex {
			b.raw("VPBLENDVB %s, %s, %s, %s", u, x, t, x)
		} else {
			b.op("and", u, x, x)
			b.op("andn", t, u, u)
			b.op("or", u, x, x)
		}
		b.sh("psrad", 16, x, x) // in int16 range, so the signed pack is exact
	}
	b.op("packssdw", x1, x0, x0)
	if b.isa.vex {
		b.raw("VPERMQ $0xD8, %s, %s", x0, x0) // undo the per-128-bit-lane packing
	}
	b.store(x0, mem("DI", 0))
	return b.isa.vs
}

// Wide kernels: the steps of a 16-bit reduction whose partial results are
// float32 (wide.go in the package). Each reads its operands, a and b, as
// 16-bit elements (widened exactly to float32) or as float32s, combines
// them in float32 and writes float32s or rounds them to the 16-bit type
// as F32ToF16 and F32ToBF16 do. n counts elements, not bytes.
type wideKind struct {
	short, goName string
	d, a, b       int // bytes per element of each stream; b 0: no b
}

var wideKinds = []wideKind{
	{"widen", "wideWiden", 4, 2, 0},
	{"narrow", "wideNarrow", 2, 4, 0},
	{"reduceWide", "wideReduce", 4, 2, 2},
	{"accumulate", "wideAccumulate", 4, 4, 2},
	{"accumulateNarrow", "wideAccumulateNarrow", 2, 4, 2},
}

// wideLane emits lane laneIdx of a wide kernel: one float32 vector of
// elements. op is "sum" or "prod" ("" for widen and narrow).
func (b *body) wideLane(dt string, k wideKind, op string, laneIdx int) {
	per := b.isa.vs / 4 // elements per lane
	mem := func(reg string, width int) string { return fmt.Sprintf("%d(%s)", laneIdx*per*width, reg) }
	x := b.r(0)
	if k.a == 2 {
		// Widen quiets a NaN as BF16ToF32 does; the others keep the bits
		// (bf16Bits), as the arithmetic quiets it.
		b.load16(dt, mem("SI", 2), x, k.short == "widen")
	} else {
		b.load(mem("SI", 4), x)
	}
	if k.b != 0 {
		y := b.r(1)
		b.load16(dt, mem("DX", 2), y, false)
		b.fop(op, "ps", x, y, nil)
	}
	if k.d == 4 {
		b.store(x, mem("DI", 4))
	} else {
		b.store16(dt, x, mem("DI", 2))
	}
}

// load16 widens the 16-bit elements at mem into the float32s of r
// (exact); for bfloat16, quiet sets the quiet bit of NaNs as BF16ToF32
// does. (VCVTPH2PS quiets float16 NaNs as F16ToF32 does.)
func (b *body) load16(dt, mem, r string, quiet bool) {
	if dt == "F16" {
		b.feat = "featF16C"
		b.raw("VCVTPH2PS %s, %s", mem, r)
		return
	}
	b.raw("VPMOVZXWD %s, %s", mem, r)
	b.sh("pslld", 16, r, r)
	if quiet {
		u := b.r(3)
		b.op("and", b.c(c32(0x7fffffff)), r, u)
		b.op("pcmpgtd", b.c(c32(0x7f800000)), u, u) // u = |r| > Inf: NaN
		b.op("and", b.c(c32(0x00400000)), u, u)
		b.op("or", u, r, r)
	}
}

// store16 rounds the float32s of x to the 16-bit type, to nearest with
// ties to even, and stores them at mem, bit for bit as F32ToF16 and
// F32ToBF16 do. x is clobbered.
func (b *body) store16(dt, x, mem string) {
	t, u := b.r(2), b.r(3)
	if dt == "F16" {
		// VCVTPS2PH keeps the top of a NaN's payload; F32ToF16 gives
		// the sign and 0x7e00, so NaN lanes are first made sign|0x7fc00000.
		b.feat = "featF16C"
		b.raw("VCMPPS $3, %s, %s, %s", x, x, t) // t = x is NaN
		b.op("and", b.c(c32(0x80000000)), x, u)
		b.op("or", b.c(c32(0x7fc00000)), u, u)
		b.raw("VPBLENDVB %s, %s, %s, %s", t, u, x, x)
		b.raw("VCVTPS2PH $0, %s, %s", x, mem) // imm 0: round to nearest even
		return
	}
	// As bf16Lane: add 0x7fff plus the lowest kept bit; NaN lanes are
	// truncated and quieted instead.
	b.sh("psrld", 16, x, t)
	b.op("and", b.c(c32(1)), t, t)
	b.op("paddd", x, t, t)
	b.op("paddd", b.c(c32(0x7fff)), t, t)
	b.op("and", b.c(c32(0x7fffffff)), x, u)
	b.op("pcmpgtd", b.c(c32(0x7f800000)), u, u) // u = |x| > Inf: NaN
	b.op("or", b.c(c32(0x00400000)), x, x)
	b.raw("VPBLENDVB %s, %s, %s, %s", u, x, t, x)
	b.sh("psrld", 16, x, x)
	xt, xx := "{x"+t[2:], "{x"+x[2:]
	b.raw("VEXTRACTI128 $1, %s, %s", x, xt)
	b.raw("VPACKUSDW %s, %s, %s", xt, xx, xx) // 16-bit values: no saturation
	b.raw("VMOVDQU %s, %s", xx, mem)
}

// genWide writes wide kernel k of dt and op at is, which must be a VEX
// level without EVEX (the lanes use the AVX2 forms).
func genWide(is *isa, dt string, k wideKind, op string, asm *bytes.Buffer) kernel {
	probe := &body{isa: is}
	probe.wideLane(dt, k, op, 0)
	unroll := min(4, (is.nregs-len(probe.consts))/probe.nr)
	if unroll < 1 {
		log.Fatalf("%s %s %s: not enough registers", is.name, dt, k.short)
	}
	regs := func(text string, laneIdx int) string {
		for i := probe.nr - 1; i >= 0; i-- {
			n := fmt.Sprintf("%d", laneIdx*probe.nr+i)
			text = strings.ReplaceAll(text, fmt.Sprintf("{r%d}", i), is.reg+n)
			text = strings.ReplaceAll(text, fmt.Sprintf("{x%d}", i), "X"+n)
		}
		for i := len(probe.consts) - 1; i >= 0; i-- {
			text = strings.ReplaceAll(text, fmt.Sprintf("{c%d}", i), fmt.Sprintf("%s%d", is.reg, is.nregs-1-i))
		}
		return text
	}
	emitLane := func(laneIdx int) {
		b := &body{isa: is}
		b.wideLane(dt, k, op, laneIdx)
		for _, l := range b.lines {
			fmt.Fprintf(asm, "\t%s\n", regs(l, laneIdx))
		}
	}
	name := k.short + dt + is.name
	if op != "" {
		name = k.short + strings.ToUpper(op[:1]) + op[1:] + dt + is.name
	}
	per := is.vs / 4
	fmt.Fprintf(asm, "\n// func %s(d, a, b *byte, n int)\n", name)
	fmt.Fprintf(asm, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
	fmt.Fprintf(asm, "\tMOVQ d+0(FP), DI\n\tMOVQ a+8(FP), SI\n")
	if k.b != 0 {
		fmt.Fprintf(asm, "\tMOVQ b+16(FP), DX\n")
	}
	fmt.Fprintf(asm, "\tMOVQ n+24(FP), CX\n")
	emitLoop(asm, is, probe, "", unroll, per, [3]int{per * k.a, per * k.b, per * k.d}, emitLane)
	return kernel{name: name, dt: dt, op: op, isa: is, block: per, feat: probe.feat, wide: k.goName}
}

type kernel struct {
	name, dt, op string
	isa          *isa
	block        int
	feat         string
	wide         string // the wideKind of a wide kernel, "" for the others
}

func gen(is *isa, dt, op string, asm *bytes.Buffer) (kernel, bool) {
	newBody := func() *body {
		b := &body{isa: is}
		if op == "div" {
			b.div = "?"
		}
		return b
	}
	probe := newBody()
	block := probe.lane(dt, op, 0)
	if block == 0 {
		return kernel{}, false
	}
	nconst := len(probe.consts)
	if probe.div != "" {
		nconst++ // the divisor sits below the constants
	}
	unroll := min(4, (is.nregs-nconst)/probe.nr)
	if unroll < 1 {
		log.Fatalf("%s %s %s: not enough registers", is.name, dt, op)
	}
	divReg := fmt.Sprintf("%s%d", is.reg, is.nregs-1-len(probe.consts))
	regs := func(text string, laneIdx int) string {
		for i := probe.nr - 1; i >= 0; i-- {
			text = strings.ReplaceAll(text, fmt.Sprintf("{r%d}", i), fmt.Sprintf("%s%d", is.reg, laneIdx*probe.nr+i))
		}
		for i := len(probe.consts) - 1; i >= 0; i-- {
			text = strings.ReplaceAll(text, fmt.Sprintf("{c%d}", i), fmt.Sprintf("%s%d", is.reg, is.nregs-1-i))
		}
		return strings.ReplaceAll(text, "{d}", divReg)
	}
	emitLane := func(laneIdx int) {
		b := newBody()
		b.lane(dt, op, laneIdx*block)
		for _, l := range b.lines {
			fmt.Fprintf(asm, "\t%s\n", regs(l, laneIdx))
		}
	}
	name := op + dt + is.name
	if op == "div" {
		// Scale: in place, the divisor passed by value.
		name = "scale" + dt + is.name
		fmt.Fprintf(asm, "\n// func %s(d *byte, n int, div32 float32, div64 float64)\n", name)
		fmt.Fprintf(asm, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
		fmt.Fprintf(asm, "\tMOVQ d+0(FP), DI\n\tMOVQ DI, SI\n\tMOVQ n+8(FP), CX\n")
	} else {
		fmt.Fprintf(asm, "\n// func %s(d, a, b *byte, n int)\n", name)
		fmt.Fprintf(asm, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
		fmt.Fprintf(asm, "\tMOVQ d+0(FP), DI\n\tMOVQ a+8(FP), SI\n\tMOVQ b+16(FP), DX\n\tMOVQ n+24(FP), CX\n")
	}
	emitLoop(asm, is, probe, divReg, unroll, block, [3]int{block, block, block}, emitLane)
	return kernel{name: name, dt: dt, op: op, isa: is, block: block, feat: probe.feat}, true
}

// emitLoop writes what follows a kernel's argument loads: the constants
// of probe broadcast into the top registers, the divisor of a Scale kernel
// into divReg, a loop of unroll lanes and a loop of one lane for the
// rest, and the return. Each lane takes step from the count in CX and
// advances SI, DX and DI by adv (a zero leaves the register alone).
func emitLoop(asm *bytes.Buffer, is *isa, probe *body, divReg string, unroll, step int, adv [3]int, emitLane func(laneIdx int)) {
	for i, v := range probe.consts {
		r := fmt.Sprintf("%s%d", is.reg, is.nregs-1-i)
		xr := "X" + r[1:]
		fmt.Fprintf(asm, "\tMOVQ $%#x, AX\n", v)
		switch {
		case is.evex:
			fmt.Fprintf(asm, "\tVPBROADCASTQ AX, %s\n", r)
		case is.vex:
			fmt.Fprintf(asm, "\tMOVQ AX, %s\n\tVPBROADCASTQ %s, %s\n", xr, xr, r)
		default:
			fmt.Fprintf(asm, "\tMOVQ AX, %s\n\tPUNPCKLQDQ %s, %s\n", r, r, r)
		}
	}
	switch probe.div {
	case "ps", "pd":
		sd, arg := "S", "div32+16(FP)"
		if probe.div == "pd" {
			sd, arg = "D", "div64+24(FP)"
		}
		if is.vex {
			fmt.Fprintf(asm, "\tVBROADCASTS%s %s, %s\n", sd, arg, divReg)
		} else if sd == "S" {
			fmt.Fprintf(asm, "\tMOVSS %s, %s\n\tSHUFPS $0, %s, %s\n", arg, divReg, divReg, divReg)
		} else {
			fmt.Fprintf(asm, "\tMOVSD %s, %s\n\tUNPCKLPD %s, %s\n", arg, divReg, divReg, divReg)
		}
	}
	advance := func(lanes int) {
		for i, reg := range []string{"SI", "DX", "DI"} {
			if adv[i] != 0 {
				fmt.Fprintf(asm, "\tADDQ $%d, %s\n", lanes*adv[i], reg)
			}
		}
	}
	if unroll > 1 {
		big := unroll * step
		fmt.Fprintf(asm, "\tCMPQ CX, $%d\n\tJB tail\nloop:\n", big)
		for l := 0; l < unroll; l++ {
			emitLane(l)
		}
		advance(unroll)
		fmt.Fprintf(asm, "\tSUBQ $%d, CX\n\tCMPQ CX, $%d\n\tJAE loop\n", big, big)
		fmt.Fprintf(asm, "tail:\n")
	}
	fmt.Fprintf(asm, "\tTESTQ CX, CX\n\tJZ done\none:\n")
	emitLane(0)
	advance(1)
	fmt.Fprintf(asm, "\tSUBQ $%d, CX\n\tJNZ one\n", step)
	fmt.Fprintf(asm, "done:\n")
	if is.vex {
		fmt.Fprintf(asm, "\tVZEROUPPER\n")
	}
	fmt.Fprintf(asm, "\tRET\n")
}

func main() {
	dir := flag.String("dir", ".", "directory to write reduce_amd64.s and kernels_amd64.go to")
	flag.Parse()
	var asm bytes.Buffer
	asm.WriteString("// Code generated by go run ./_gen; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	var ks []kernel
	for _, is := range isas {
		for _, dt := range dtypes {
			for _, op := range ops {
				if op.short == "div" && !strings.HasPrefix(dt.short, "F") && dt.short != "BF16" {
					continue
				}
				if k, ok := gen(is, dt.short, op.short, &asm); ok {
					ks = append(ks, k)
				}
			}
		}
	}
	// The wide kernels exist at the AVX2 level (float16 needing F16C, as
	// its Reduce kernels do); the AVX-512 level uses them too.
	var wks []kernel
	for _, is := range isas {
		if is.name != "AVX2" {
			continue
		}
		for _, dt := range []string{"F16", "BF16"} {
			for _, k := range wideKinds {
				wops := []string{"sum", "prod"}
				if k.b == 0 {
					wops = []string{""}
				}
				for _, op := range wops {
					wks = append(wks, genWide(is, dt, k, op, &asm))
				}
			}
		}
	}
	goName := map[string]string{"": "Sum"}
	for _, d := range dtypes {
		goName[d.short] = d.goName
	}
	for _, o := range ops {
		goName[o.short] = o.goName
	}
	var src bytes.Buffer
	src.WriteString("// Code generated by go run ./_gen; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage reduce\n\n")
	for _, k := range ks {
		if k.op == "div" {
			fmt.Fprintf(&src, "//go:noescape\nfunc %s(d *byte, n int, div32 float32, div64 float64)\n\n", k.name)
		} else {
			fmt.Fprintf(&src, "//go:noescape\nfunc %s(d, a, b *byte, n int)\n\n", k.name)
		}
	}
	src.WriteString("// asmKernels lists every assembly kernel with its level, the bytes of\n// output it handles per step, and any CPU feature it needs beyond its level.\nvar asmKernels = []asmKernel{\n")
	for _, k := range ks {
		feat := k.feat
		if feat == "" {
			feat = "0"
		}
		fn, sfn := k.name, "nil"
		if k.op == "div" {
			fn, sfn = "nil", k.name
		}
		fmt.Fprintf(&src, "\t{%s, %s, %s, %s, %s, %d, %s},\n", k.isa.level, goName[k.dt], goName[k.op], fn, sfn, k.block, feat)
	}
	src.WriteString("}\n\n")
	for _, k := range wks {
		fmt.Fprintf(&src, "//go:noescape\nfunc %s(d, a, b *byte, n int)\n\n", k.name)
	}
	src.WriteString("// wideKernels lists the kernels of the float32-partials steps (wide.go):\n// n and the block count elements. Widen and Narrow are listed under Sum.\nvar wideKernels = []wideKernel{\n")
	for _, k := range wks {
		feat := k.feat
		if feat == "" {
			feat = "0"
		}
		fmt.Fprintf(&src, "\t{%s, %s, %s, %s, %s, %d, %s},\n", k.isa.level, goName[k.dt], k.wide, goName[k.op], k.name, k.block, feat)
	}
	src.WriteString("}\n")
	out, err := format.Source(src.Bytes())
	if err != nil {
		log.Fatalf("format: %v\n%s", err, src.Bytes())
	}
	if err := os.WriteFile(filepath.Join(*dir, "kernels_amd64.go"), out, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "reduce_amd64.s"), asm.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("%d kernels, %d wide", len(ks), len(wks))
}
