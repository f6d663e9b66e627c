package reduce

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/testmode"
)

// levels returns the kernel levels this CPU supports, lowest first: in
// the quick check the Go fallback and the best alone (the levels between
// run the same kernels' narrower forms; the full run tries each).
func levels() []level {
	var ls []level
	for l := levelGo; l <= maxLevel; l++ {
		if tables[l] != nil {
			ls = append(ls, l)
		}
	}
	if testmode.Quick() && len(ls) > 2 {
		ls = []level{ls[0], ls[len(ls)-1]}
	}
	return ls
}

// useLevel switches Reduce to level l until the test ends. Tests that call
// it must not run in parallel.
func useLevel(t *testing.T, l level) {
	t.Helper()
	if tables[l] == nil {
		t.Fatalf("level %v not available", l)
	}
	old := activeLevel
	setLevel(l)
	t.Cleanup(func() { setLevel(old) })
}

func TestLevelsAvailable(t *testing.T) {
	ls := levels()
	t.Logf("levels on this CPU: %v (active %v)", ls, activeLevel)
	if ls[0] != levelGo {
		t.Errorf("the Go level is missing")
	}
	if runtime.GOARCH == "amd64" && len(asmKernels) > 0 && tables[levelSSE2] == nil {
		t.Errorf("amd64 without the SSE2 level")
	}
	if len(asmKernels) == 0 && len(ls) != 1 {
		t.Errorf("levels %v without assembly kernels", ls)
	}
	// On a machine whose /proc/cpuinfo lists the features, every level must
	// have been detected, so that the tests below exercise all of them.
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil && len(asmKernels) > 0 {
		s := string(info)
		has := func(f string) bool { return strings.Contains(s, " "+f+" ") || strings.Contains(s, " "+f+"\n") }
		if has("avx2") && tables[levelAVX2] == nil {
			t.Errorf("cpuinfo lists avx2 but the AVX2 level is unavailable")
		}
		if has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl") && tables[levelAVX512] == nil {
			t.Errorf("cpuinfo lists avx512f/bw/dq/vl but the AVX-512 level is unavailable")
		}
	}
}

// TestEveryKernelSelected checks that each assembly kernel the CPU can run
// is the one its own level uses, so that testing every level tests every
// kernel.
func TestEveryKernelSelected(t *testing.T) {
	_, feats := detectCPU()
	n := 0
	for _, k := range asmKernels {
		if tables[k.lvl] == nil || k.feat&^feats != 0 {
			continue
		}
		got := tables[k.lvl][k.dt][k.op][0]
		if (got.fn == nil && got.sfn == nil) || !sameFunc(got.fn, k.fn) || !sameFunc(got.sfn, k.sfn) || got.block != k.block {
			t.Errorf("%v %v/%v: level table does not use its own kernel: %+v", k.lvl, k.dt, k.op, got)
		}
		if k.block&(k.block-1) != 0 || k.block%k.dt.Size() != 0 {
			t.Errorf("%v %v/%v: block %d", k.lvl, k.dt, k.op, k.block)
		}
		n++
	}
	t.Logf("%d assembly kernels checked", n)
	// The remainder kernel, when there is one, has a smaller block, so the Go
	// loop sees fewer elements than one block of the smallest kernel.
	for _, l := range levels() {
		for dt := range tables[l] {
			for op, ks := range tables[l][dt] {
				if ks[1].block != 0 && (ks[0].block == 0 || ks[1].block >= ks[0].block) {
					t.Errorf("%v %v/%v: remainder kernel block %d, first %d", l, DType(dt), Op(op), ks[1].block, ks[0].block)
				}
			}
		}
	}
	if tables[levelAVX512] != nil {
		if ks := tables[levelAVX512][Float32][Sum]; ks[0].block != 32 || ks[1].block != 16 {
			t.Errorf("avx512 float32 sum blocks %d, %d; want 32, then 16 (SSE2)", ks[0].block, ks[1].block)
		}
	}
	for _, l := range levels() {
		for dt := range tables[l] {
			avg, sum := tables[l][dt][Avg], tables[l][dt][Sum]
			if avg[0].block != sum[0].block || !sameFunc(avg[0].fn, sum[0].fn) || avg[1].block != sum[1].block || !sameFunc(avg[1].fn, sum[1].fn) {
				t.Errorf("%v: %v avg does not use the sum kernel", l, DType(dt))
			}
		}
	}
}

func sameFunc(f, g any) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(g).Pointer()
}

// placed returns a slice of n bytes at byte offset off inside a guarded
// buffer filled with 0xa5, and a check that the guard is intact.
func placed(src []byte, off int) ([]byte, func() bool) {
	const pad = 64
	backing := make([]byte, off+len(src)+2*pad)
	for i := range backing {
		backing[i] = 0xa5
	}
	s := backing[pad+off : pad+off+len(src) : pad+off+len(src)]
	copy(s, src)
	return s, func() bool {
		for i, c := range backing {
			if (i < pad+off || i >= pad+off+len(src)) && c != 0xa5 {
				return false
			}
		}
		return true
	}
}

// randOffset returns a random byte offset: mostly a multiple of the element
// size (so vector loads are unaligned but elements are not), sometimes odd.
func randOffset(rng *rand.Rand, dt DType) int {
	if rng.Intn(4) == 0 {
		return rng.Intn(64)
	}
	return rng.Intn(64/dt.Size()) * dt.Size()
}

// TestKernelsAgainstReference runs every dtype and op at every level the
// CPU has, on every length 0..130 and a few random larger lengths, with the
// three buffers at random offsets (unaligned heads and tails) inside guard
// bytes, out of place and in place (a op= b, b op= a).
func TestKernelsAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewSource(99))
	lengths := testLengths(rng)
	for i := 0; i < 6; i++ {
		lengths = append(lengths, 131+rng.Intn(5000))
	}
	for _, dt := range allDTypes {
		for _, op := range allOps {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				for _, n := range lengths {
					a := genValues(rng, dt, n)
					b := genValues(rng, dt, n)
					want := refReduce(dt, op, a, b)
					for _, l := range levels() {
						useLevel(t, l)
						checkReduce(t, rng, l, dt, op, a, b, want)
					}
				}
			})
		}
	}
}

func checkReduce(t *testing.T, rng *rand.Rand, l level, dt DType, op Op, a0, b0, want []byte) {
	t.Helper()
	n := len(a0) / dt.Size()
	a, aOK := placed(a0, randOffset(rng, dt))
	b, bOK := placed(b0, randOffset(rng, dt))
	dst, dOK := placed(make([]byte, len(a0)), randOffset(rng, dt))
	Reduce(dt, op, dst, a, b)
	if i := compareElems(dt, dst, want); i >= 0 {
		t.Fatalf("%v n=%d: element %d: %s %s %s = %s, want %s", l, n, i,
			fmtElem(dt, a, i), op, fmtElem(dt, b, i), fmtElem(dt, dst, i), fmtElem(dt, want, i))
	}
	if !aOK() || !bOK() || !dOK() {
		t.Fatalf("%v n=%d: wrote outside a buffer", l, n)
	}
	if !bytes.Equal(a, a0) || !bytes.Equal(b, b0) {
		t.Fatalf("%v n=%d: inputs modified", l, n)
	}
	if i := firstSignalingNaN(dt, dst); i >= 0 {
		t.Fatalf("%v n=%d: element %d is a signaling NaN %s", l, n, i, fmtElem(dt, dst, i))
	}
	// In place: a op= b, and b = a op b.
	Reduce(dt, op, a, a, b)
	if i := compareElems(dt, a, want); i >= 0 {
		t.Fatalf("%v n=%d in place (dst=a): element %d = %s, want %s", l, n, i, fmtElem(dt, a, i), fmtElem(dt, want, i))
	}
	copy(a, a0)
	Reduce(dt, op, b, a, b)
	if i := compareElems(dt, b, want); i >= 0 {
		t.Fatalf("%v n=%d in place (dst=b): element %d = %s, want %s", l, n, i, fmtElem(dt, b, i), fmtElem(dt, want, i))
	}
	if !aOK() || !bOK() {
		t.Fatalf("%v n=%d: in place: wrote outside a buffer", l, n)
	}
}

// TestKernelsSpecialPairs reduces every pair of special values (NaN, ±Inf,
// ±0, subnormals, extremes) for the float types, and every pair of extreme
// values for the integers, at every level.
func TestKernelsSpecialPairs(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, dt := range allDTypes {
		var specials []uint64
		switch dt {
		case Float32:
			for _, v := range specialF32 {
				specials = append(specials, uint64(v))
			}
		case Float64:
			specials = specialF64
		case Float16:
			for _, v := range specialF16 {
				specials = append(specials, uint64(v))
			}
		case BFloat16:
			for _, v := range specialBF16 {
				specials = append(specials, uint64(v))
			}
		default:
			bits := 8 * dt.Size()
			specials = []uint64{0, 1, 2, 3, ^uint64(0), ^uint64(1), 1<<(bits-1) - 1, 1 << (bits - 1), 1<<(bits-1) + 1, 1 << (bits / 2), 1<<(bits/2) + 1}
		}
		k := len(specials)
		a, b := make([]byte, k*k*dt.Size()), make([]byte, k*k*dt.Size())
		for i := 0; i < k*k; i++ {
			putUint(dt, a, i, specials[i/k])
			putUint(dt, b, i, specials[i%k])
		}
		for _, op := range allOps {
			want := refReduce(dt, op, a, b)
			for _, l := range levels() {
				useLevel(t, l)
				checkReduce(t, rng, l, dt, op, a, b, want)
			}
		}
	}
}

// TestKernelsHalfExhaustive puts all 65536 float16 and bfloat16 bit patterns
// through the vector widening and rounding of every level: x + (-0) and
// max(x, -Inf) are x itself, and x op rotated-x covers rounding of sums and
// products of every input.
func TestKernelsHalfExhaustive(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	for _, dt := range []DType{Float16, BFloat16} {
		all := make([]byte, 2<<16)
		for i := 0; i < 1<<16; i++ {
			ne.PutUint16(all[2*i:], uint16(i))
		}
		negInf, negZero := uint64(0xfc00), uint64(0x8000)
		if dt == BFloat16 {
			negInf = 0xff80
		}
		fill := func(v uint64) []byte {
			b := make([]byte, len(all))
			for i := 0; i < 1<<16; i++ {
				putUint(dt, b, i, v)
			}
			return b
		}
		rot := append(bytes.Clone(all[2*12345:]), all[:2*12345]...)
		shuffled := bytes.Clone(all)
		rng.Shuffle(1<<16, func(i, j int) {
			x, y := ne.Uint16(shuffled[2*i:]), ne.Uint16(shuffled[2*j:])
			ne.PutUint16(shuffled[2*i:], y)
			ne.PutUint16(shuffled[2*j:], x)
		})
		cases := []struct {
			op Op
			b  []byte
		}{
			{Sum, fill(negZero)}, {Max, fill(negInf)}, {Min, fill(negInf ^ 0x8000)},
			{Sum, rot}, {Prod, rot}, {Sum, shuffled}, {Prod, shuffled}, {Min, shuffled}, {Max, shuffled},
		}
		for _, c := range cases {
			want := refReduce(dt, c.op, all, c.b)
			if c.op != Prod && bytes.Equal(c.b, fill(negZero)) {
				// Sanity of the reference itself: x + -0 is x (NaNs aside).
				for i := 0; i < 1<<16; i++ {
					if !elemIsNaN(dt, all, i) && getUint(dt, want, i) != uint64(i) {
						t.Fatalf("%v: reference %#04x + -0 = %#04x", dt, i, getUint(dt, want, i))
					}
				}
			}
			for _, l := range levels() {
				useLevel(t, l)
				checkReduce(t, rng, l, dt, c.op, all, c.b, want)
			}
		}
	}
}

func TestChooseLevel(t *testing.T) {
	tests := []struct {
		env       string
		best      level
		want      level
		errIs     error
		errSubstr string
	}{
		{"", levelAVX512, levelAVX512, nil, ""},
		{"auto", levelAVX2, levelAVX2, nil, ""},
		{"off", levelAVX512, levelGo, nil, ""},
		{" SSE2 ", levelAVX512, levelSSE2, nil, ""},
		{"avx2", levelAVX512, levelAVX2, nil, ""},
		{"avx512", levelAVX512, levelAVX512, nil, ""},
		{"avx512", levelAVX2, levelAVX2, errUnavailable, `GOCOLL_SIMD=avx512: this CPU supports at most "avx2"`},
		{"sse2", levelGo, levelGo, errUnavailable, `at most "off"`},
		{"neon", levelSSE2, levelSSE2, nil, `GOCOLL_SIMD="neon": unknown value`},
	}
	for _, tc := range tests {
		got, err := chooseLevel(tc.env, tc.best)
		if got != tc.want {
			t.Errorf("chooseLevel(%q, %v) = %v, want %v", tc.env, tc.best, got, tc.want)
		}
		if (err != nil) != (tc.errSubstr != "") {
			t.Errorf("chooseLevel(%q, %v) error = %v, want one: %v", tc.env, tc.best, err, tc.errSubstr != "")
			continue
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrSIMD) || (tc.errIs != nil && !errors.Is(err, tc.errIs)) {
			t.Errorf("chooseLevel(%q): %v does not wrap ErrSIMD / %v", tc.env, err, tc.errIs)
		}
		if !strings.Contains(err.Error(), tc.errSubstr) {
			t.Errorf("chooseLevel(%q) = %q, want it to contain %q", tc.env, err, tc.errSubstr)
		}
	}
}

// TestSIMDEnv runs this test binary again with GOCOLL_SIMD set, to check
// that the variable is read at start-up and that a bad value is reported and
// survived.
func TestSIMDEnv(t *testing.T) {
	if os.Getenv("GOCOLL_SIMD_CHILD") != "" {
		// Child: report and do a reduction at the chosen level.
		a := genValues(rand.New(rand.NewSource(1)), Float32, 1000)
		dst := make([]byte, len(a))
		Reduce(Float32, Sum, dst, a, a)
		if i := compareElems(Float32, dst, refReduce(Float32, Sum, a, a)); i >= 0 {
			t.Fatalf("element %d wrong", i)
		}
		os.Stdout.WriteString("LEVEL=" + SIMDLevel() + "\n")
		if err := SIMDConfigError(); err != nil {
			os.Stdout.WriteString("CONFIGERR=" + err.Error() + "\n")
		}
		return
	}
	best := levels()[len(levels())-1]
	run := func(env string) (string, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSIMDEnv$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GOCOLL_SIMD_CHILD=1", "GOCOLL_SIMD="+env)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("GOCOLL_SIMD=%s: child failed: %v\n%s%s", env, err, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	for _, l := range levels() {
		out, _ := run(l.String())
		if !strings.Contains(out, "LEVEL="+l.String()+"\n") || strings.Contains(out, "CONFIGERR") {
			t.Errorf("GOCOLL_SIMD=%v: child said %q", l, out)
		}
	}
	out, stderr := run("bogus")
	if !strings.Contains(out, "LEVEL="+best.String()+"\n") || !strings.Contains(out, `CONFIGERR=GOCOLL_SIMD="bogus": unknown value`) {
		t.Errorf("GOCOLL_SIMD=bogus: child said %q", out)
	}
	if !strings.Contains(stderr, "GOCOLL_SIMD") || !strings.Contains(stderr, "level=WARN") {
		t.Errorf("GOCOLL_SIMD=bogus: no warning on stderr: %q", stderr)
	}
	if best < maxLevel {
		out, _ := run(maxLevel.String())
		if !strings.Contains(out, "LEVEL="+best.String()+"\n") || !strings.Contains(out, "not available") {
			t.Errorf("GOCOLL_SIMD=%v on a %v CPU: child said %q", maxLevel, best, out)
		}
	}
}

// TestEveryLevel runs the behavioural tests written for Reduce and Scale
// (known values, aliasing, misaligned buffers, exhaustive float16/bfloat16
// Scale, no allocations) at every level the CPU has.
func TestEveryLevel(t *testing.T) {
	for _, l := range levels() {
		t.Run(l.String(), func(t *testing.T) {
			useLevel(t, l)
			t.Run("KnownValues", TestReduceKnownValues)
			t.Run("Aliasing", TestReduceAliasing)
			t.Run("Misaligned", TestReduceMisaligned)
			t.Run("AlignedSubslices", TestReduceAlignedSubslices)
			t.Run("Empty", TestReduceEmpty)
			t.Run("Scale", TestScale)
			t.Run("DoesNotAllocate", TestReduceDoesNotAllocate)
		})
	}
}

// TestGeneratedUpToDate regenerates the kernels and compares them with the
// checked-in files, so that an edit of one without the other fails here.
func TestGeneratedUpToDate(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs the generator and needs the go command: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(goTool, "run", "./_gen", "-dir", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./_gen: %v\n%s", err, out)
	}
	for _, f := range []string{"reduce_amd64.s", "kernels_amd64.go"} {
		want, err := os.ReadFile(dir + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what _gen writes: run go generate in internal/reduce", f)
		}
	}
}

// TestKernelsChunked covers buffers longer than kernelChunk, which Reduce
// and Scale split into several kernel calls.
func TestKernelsChunked(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	for _, dt := range allDTypes {
		n := 2*kernelChunk/dt.Size() + 1 + rng.Intn(40)
		a, b := genValues(rng, dt, n), genValues(rng, dt, n)
		for _, op := range []Op{Sum, Max} {
			want := refReduce(dt, op, a, b)
			for _, l := range levels() {
				useLevel(t, l)
				checkReduce(t, rng, l, dt, op, a, b, want)
			}
		}
		if !dt.IsFloat() {
			continue
		}
		useLevel(t, levelGo)
		want := bytes.Clone(a)
		Scale(dt, want, 7)
		for _, l := range levels() {
			useLevel(t, l)
			got, ok := placed(a, randOffset(rng, dt))
			Scale(dt, got, 7)
			if i := compareElems(dt, got, want); i >= 0 {
				t.Fatalf("%v Scale %v n=%d: element %d = %s, want %s", l, dt, n, i, fmtElem(dt, got, i), fmtElem(dt, want, i))
			}
			if !ok() {
				t.Fatalf("%v Scale %v n=%d: wrote outside the buffer", l, dt, n)
			}
		}
	}
}
