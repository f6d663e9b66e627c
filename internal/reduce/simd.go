package reduce

//go:generate go run ./_gen

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/settings"
)

// level is a kernel instruction set. Higher levels include the lower ones.
type level uint8

const (
	levelGo     level = iota // portable Go loops
	levelSSE2                // amd64 baseline, 128-bit
	levelAVX2                // 256-bit; float16 also needs F16C
	levelAVX512              // AVX-512 F, BW, DQ and VL, on 256-bit vectors

	maxLevel = levelAVX512
)

var levelNames = [maxLevel + 1]string{"off", "sse2", "avx2", "avx512"}

func (l level) String() string {
	if l > maxLevel {
		return fmt.Sprintf("level(%d)", uint8(l))
	}
	return levelNames[l]
}

// feature is a CPU feature a kernel needs beyond its level.
type feature uint8

const featF16C feature = 1 << iota

// kernelFunc computes n bytes of d = a op b; n is a multiple of the kernel's
// block. Kernels load both operands of a block before storing it, so d may
// alias a or b exactly.
type kernelFunc func(d, a, b *byte, n int)

// scaleFunc divides n bytes of d in place by div32 (div64 for Float64); n
// is a multiple of the kernel's block. The divisor is passed by value so
// that calling through a func value does not make it escape.
type scaleFunc func(d *byte, n int, div32 float32, div64 float64)

type asmKernel struct {
	lvl   level
	dt    DType
	op    Op // or opScale
	fn    kernelFunc
	sfn   scaleFunc // for opScale
	block int       // bytes of output per step, a power of two
	feat  feature
}

type kern struct {
	fn    kernelFunc
	sfn   scaleFunc
	block int
}

// opScale indexes the Scale kernels (sfn) in a kernTable.
const opScale = maxOp + 1

// kernTable holds, for each (dtype, op) at one level, the kernel to run
// first and a kernel with a smaller block (from a lower level) for what is
// left, so that at most a few elements reach the Go loop; nil functions
// mean the Go loop. Avg uses the Sum kernels.
type kernTable [maxDType + 1][opScale + 1][2]kern

// wideKind is one of the steps of a 16-bit reduction with float32
// partial results (wide.go) that has vector kernels.
type wideKind uint8

const (
	wideWiden            wideKind = iota // Widen
	wideNarrow                           // Narrow
	wideReduce                           // ReduceWide
	wideAccumulate                       // Accumulate
	wideAccumulateNarrow                 // AccumulateNarrow

	numWideKinds
)

// wideKernel is an assembly kernel of a wide step: fn(d, a, b, n) runs
// the step over n elements, a multiple of block; b is nil for Widen and
// Narrow, which are listed under Sum. Like the Reduce kernels, it loads
// a block's operands before storing its result, so d may alias a or b
// where wide.go allows it.
type wideKernel struct {
	lvl   level
	dt    DType
	kind  wideKind
	op    Op // Sum or Prod
	fn    kernelFunc
	block int // elements
	feat  feature
}

// wideTable holds, for each 16-bit dtype and wide step at one level, the
// kernel for Sum (and Avg) at [0] and for Prod at [1]; a nil fn means
// the Go loop.
type wideTable [maxDType + 1][numWideKinds][2]kern

// ErrSIMD is wrapped by the error SIMDConfigError reports for a GOCOLL_SIMD
// value that cannot be honoured.
var ErrSIMD = errors.New("GOCOLL_SIMD")

var (
	// tables[l] is non-nil for every level this CPU supports.
	tables [maxLevel + 1]*kernTable
	// active is the table Reduce uses: chosen once at init from the CPU and
	// GOCOLL_SIMD. Tests switch it to exercise every level in one process.
	active      *kernTable
	activeLevel level
	configErr   error
	// wideTables[l] and activeWide are the same for the wide steps.
	wideTables [maxLevel + 1]*wideTable
	activeWide *wideTable
)

// minBlock is the smallest block of any kernel this build has, at any
// level: buffers shorter than it go straight to the Go loop.
var minBlock = func() int {
	m := math.MaxInt
	for _, k := range asmKernels {
		m = min(m, k.block)
	}
	return m
}()

func init() {
	best, feats := detectCPU()
	for l := levelGo; l <= best; l++ {
		tables[l] = buildTable(l, feats)
		wideTables[l] = buildWideTable(l, feats)
	}
	v, err := settings.SIMD(os.LookupEnv)
	lvl := best
	var bad *settings.Error
	if errors.As(err, &bad) {
		err = fmt.Errorf("%w=%q: unknown value, want %s", ErrSIMD, bad.Value, bad.Want)
	} else {
		lvl, err = chooseLevel(v, best)
	}
	setLevel(lvl)
	configErr = err
	if err != nil {
		logging.L().Warn("reduce: ignoring GOCOLL_SIMD", "err", err, "using", lvl.String())
	}
}

// buildTable picks, for every (dtype, op), the kernel of the highest level
// not above l whose features the CPU has, and then the one with the smallest
// block among those, if its block is smaller, for the remainder.
func buildTable(l level, feats feature) *kernTable {
	t := new(kernTable)
	var from [maxDType + 1][opScale + 1]level
	usable := func(k *asmKernel) bool { return k.lvl <= l && k.feat&^feats == 0 }
	for i := range asmKernels {
		k := &asmKernels[i]
		if cur := &t[k.dt][k.op][0]; usable(k) && (cur.block == 0 || k.lvl > from[k.dt][k.op]) {
			*cur, from[k.dt][k.op] = kern{k.fn, k.sfn, k.block}, k.lvl
		}
	}
	for i := range asmKernels {
		k := &asmKernels[i]
		ks := &t[k.dt][k.op]
		if usable(k) && k.block < ks[0].block && (ks[1].block == 0 || k.block < ks[1].block) {
			ks[1] = kern{k.fn, k.sfn, k.block}
		}
	}
	for dt := range t {
		t[dt][Avg] = t[dt][Sum]
		if !DType(dt).IsFloat() {
			t[dt][ExactSum] = t[dt][Sum]
		}
	}
	return t
}

// buildWideTable picks, for every 16-bit dtype, wide step and op, the
// kernel of the highest level not above l whose features the CPU has.
func buildWideTable(l level, feats feature) *wideTable {
	t := new(wideTable)
	var from [maxDType + 1][numWideKinds][2]level
	for i := range wideKernels {
		k := &wideKernels[i]
		j := wideOpIndex(k.op)
		if k.lvl <= l && k.feat&^feats == 0 && (t[k.dt][k.kind][j].fn == nil || k.lvl > from[k.dt][k.kind][j]) {
			t[k.dt][k.kind][j], from[k.dt][k.kind][j] = kern{fn: k.fn, block: k.block}, k.lvl
		}
	}
	return t
}

// wideOpIndex is op's index in a wideTable: 1 for Prod, 0 for Sum and Avg
// (and for Widen and Narrow, which have no op).
func wideOpIndex(op Op) int {
	if op == Prod {
		return 1
	}
	return 0
}

// setLevel makes l, which the CPU must support, the level of the kernels
// Reduce, Scale and the wide steps use. init calls it; tests and
// benchmarks switch levels with it (not while kernels run).
func setLevel(l level) {
	activeLevel, active, activeWide = l, tables[l], wideTables[l]
}

// chooseLevel interprets GOCOLL_SIMD. Empty (or "auto") means the best level
// the CPU supports. A level the CPU lacks, or an unknown value, is not fatal:
// reductions are correct at every level, so the best supported level is used
// and the returned error (wrapping ErrSIMD) says why.
func chooseLevel(v string, best level) (level, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" || v == "auto" {
		return best, nil
	}
	for l, name := range levelNames {
		if v == name {
			if level(l) > best {
				return best, fmt.Errorf("%w=%s: this CPU supports at most %q: %w", ErrSIMD, v, best.String(), errUnavailable)
			}
			return level(l), nil
		}
	}
	return best, fmt.Errorf("%w=%q: unknown value, want one of off, sse2, avx2, avx512, auto", ErrSIMD, v)
}

var errUnavailable = errors.New("instruction set not available")

// SIMDLevel returns the name of the kernel level in use: "off" (portable Go),
// "sse2", "avx2" or "avx512".
func SIMDLevel() string { return activeLevel.String() }

// SIMDConfigError returns the problem with GOCOLL_SIMD found at start-up,
// or nil. It wraps ErrSIMD.
func SIMDConfigError() error { return configErr }
