package reduce

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
)

// chainReduce is what ReduceN must equal: the two-operand chain
// acc = ins[k-2] op ins[k-1], acc = ins[j] op acc down to j = 0, one
// Reduce call per step over the whole length, at the active level.
func chainReduce(dt DType, op Op, ins [][]byte) []byte {
	k := len(ins)
	acc := bytes.Clone(ins[k-1])
	for j := k - 2; j >= 0; j-- {
		Reduce(dt, op, acc, ins[j], acc)
	}
	return acc
}

// naryOps are the ops ReduceN takes on dt: ExactSum only on integers.
func naryOps(dt DType) []Op {
	if dt.IsFloat() {
		return allOps
	}
	return append(append([]Op(nil), allOps...), ExactSum)
}

// naryAlias says where ReduceN's dst is in checkReduceN.
type naryAlias int

const (
	ownDst   naryAlias = iota // a buffer of its own
	firstDst                  // ins[0], as the single copy passes it
	lastDst                   // ins[k-1]
)

var aliasNames = [...]string{"own", "dst=ins[0]", "dst=ins[k-1]"}

// checkReduceN runs ReduceN on copies of rows placed at the given byte
// offsets inside guard bytes, dst where alias says, and compares it with
// the chain of Reduce calls, bit for bit (any NaN matching any NaN, as
// between kernel levels), and checks that no byte outside dst changed.
func checkReduceN(t *testing.T, dt DType, op Op, rows [][]byte, offs []int, alias naryAlias) {
	t.Helper()
	checkNaryAgainst(t, ReduceN, dt, op, rows, offs, alias, chainReduce(dt, op, rows))
}

// checkNaryAgainst is checkReduceN for reduceN (ReduceN or ReduceNWide)
// against want.
func checkNaryAgainst(t *testing.T, reduceN func(DType, Op, []byte, [][]byte), dt DType, op Op, rows [][]byte, offs []int, alias naryAlias, want []byte) {
	t.Helper()
	k := len(rows)
	ins := make([][]byte, k)
	oks := make([]func() bool, k)
	for j, r := range rows {
		ins[j], oks[j] = placed(r, offs[j])
	}
	var dst []byte
	switch alias {
	case ownDst:
		var ok func() bool
		dst, ok = placed(make([]byte, len(rows[0])), offs[k])
		oks = append(oks, ok)
	case firstDst:
		dst = ins[0]
	case lastDst:
		dst = ins[k-1]
	}
	reduceN(dt, op, dst, ins)
	n := len(want) / dt.Size()
	if i := compareElems(dt, dst, want); i >= 0 {
		t.Fatalf("%v %v k=%d n=%d %s offsets %v (level %v): element %d = %s, want %s",
			dt, op, k, n, aliasNames[alias], offs, activeLevel, i, fmtElem(dt, dst, i), fmtElem(dt, want, i))
	}
	for j, ok := range oks {
		if !ok() {
			t.Fatalf("%v %v k=%d n=%d %s: wrote outside buffer %d", dt, op, k, n, aliasNames[alias], j)
		}
	}
	for j := range ins {
		if (alias != firstDst || j != 0) && (alias != lastDst || j != k-1) && !bytes.Equal(ins[j], rows[j]) {
			t.Fatalf("%v %v k=%d n=%d %s: input %d modified", dt, op, k, n, aliasNames[alias], j)
		}
	}
}

// TestReduceNAgainstChain checks ReduceN against the chained Reduce for
// every dtype and op, 1 to 17 inputs, odd lengths (past the vector
// kernels' blocks and the Go path's scratch pieces), inputs at random
// and odd offsets, dst its own, the first or the last input, at every
// kernel level the CPU has.
func TestReduceNAgainstChain(t *testing.T) {
	rng := rand.New(rand.NewSource(44))
	lengths := []int{0, 1, 3, 7, 9, 31, 33, 65, 257, 1001 + 2*rng.Intn(500)}
	maxK := 17
	if testing.Short() {
		maxK = 9
	}
	for _, l := range levels() {
		useLevel(t, l)
		for _, dt := range allDTypes {
			long := naryScratch/dt.Size() + 1 + 2*rng.Intn(1000) // crosses a scratch piece
			for _, op := range naryOps(dt) {
				t.Run(fmt.Sprintf("%v/%v/%v", l, dt, op), func(t *testing.T) {
					eachNaryShape(maxK, lengths, long, func(k, n int) {
						rows := make([][]byte, k)
						offs := make([]int, k+1)
						for j := range rows {
							rows[j] = genValues(rng, dt, n)
							offs[j] = randOffset(rng, dt)
						}
						offs[k] = randOffset(rng, dt)
						checkReduceN(t, dt, op, rows, offs, naryAlias(rng.Intn(3)))
					})
				})
			}
		}
	}
}

// wideChainReduce is what ReduceNWide must equal: the steps the wide
// ring takes for one block, each a wide kernel call over the whole
// length: ins[k-2] op ins[k-1] in float32, then ins[j] for j from k-3
// down to 1, then ins[0] with the one rounding (Avg: ins[0] added, the
// float32 sum divided by k, then rounded).
func wideChainReduce(dt DType, op Op, ins [][]byte) []byte {
	k := len(ins)
	out := bytes.Clone(ins[0])
	if k == 1 {
		return out
	}
	acc := make([]byte, 2*len(out))
	ReduceWide(dt, op, acc, ins[k-2], ins[k-1])
	for j := k - 3; j > 0; j-- {
		Accumulate(dt, op, acc, acc, ins[j])
	}
	switch {
	case op == Avg:
		if k > 2 {
			Accumulate(dt, op, acc, acc, ins[0])
		}
		Scale(Float32, acc, k)
		Narrow(dt, out, acc)
	case k == 2:
		Narrow(dt, out, acc)
	default:
		AccumulateNarrow(dt, op, out, acc, ins[0])
	}
	return out
}

// TestReduceNWideAgainstChain checks ReduceNWide against the wide chain
// (wideChainReduce) for Float16 and BFloat16 Sum, Avg and Prod, 1 to 17
// inputs (in -short too), odd lengths (past the wide kernels' blocks and the scratch
// pieces), special values (NaN, Inf, subnormals, ties), inputs at odd
// offsets and dst its own, the first or the last input, at every kernel
// level; and against a float32 loop of its own that rounds once, so
// that the chain itself is pinned.
func TestReduceNWideAgainstChain(t *testing.T) {
	rng := rand.New(rand.NewSource(45))
	lengths := []int{0, 1, 3, 7, 9, 15, 17, 31, 33, 65, 257, 1001 + 2*rng.Intn(500)}
	long := naryScratch/2 + 1 + 2*rng.Intn(1000) // 16-bit elements crossing a scratch piece
	for _, l := range levels() {
		useLevel(t, l)
		for _, dt := range []DType{Float16, BFloat16} {
			for _, op := range []Op{Sum, Avg, Prod} {
				t.Run(fmt.Sprintf("%v/%v/%v", l, dt, op), func(t *testing.T) {
					eachNaryShape(17, lengths, long, func(k, n int) {
						rows := make([][]byte, k)
						for j := range rows {
							rows[j] = genValues(rng, dt, n)
						}
						checkReduceNWide(t, rng, dt, op, rows)
					})
				})
			}
		}
	}
}

// checkReduceNWide runs ReduceNWide on copies of rows at random offsets,
// dst at a random place (see naryAlias), and compares the result with
// wideChainReduce, which it first compares with loopWide (see
// checkNaryAgainst).
func checkReduceNWide(t *testing.T, rng *rand.Rand, dt DType, op Op, rows [][]byte) {
	t.Helper()
	k := len(rows)
	want := wideChainReduce(dt, op, rows)
	if i := compareElems(dt, loopWide(dt, op, rows), want); i >= 0 {
		t.Fatalf("%v %v k=%d: the wide kernels' chain gives %s at element %d, a float32 loop %s",
			dt, op, k, fmtElem(dt, want, i), i, fmtElem(dt, loopWide(dt, op, rows), i))
	}
	offs := make([]int, k+1)
	for j := range offs {
		offs[j] = randOffset(rng, dt)
	}
	checkNaryAgainst(t, ReduceNWide, dt, op, rows, offs, naryAlias(rng.Intn(3)), want)
}

// loopWide is the wide chain element by element in plain float32: from
// ins[k-1] down to ins[0], divided by k for Avg, rounded once.
func loopWide(dt DType, op Op, ins [][]byte) []byte {
	k := len(ins)
	out := make([]byte, len(ins[0]))
	for i := 0; i < len(out)/2; i++ {
		acc := widen(dt, ins[k-1], i)
		for j := k - 2; j >= 0; j-- {
			acc = apply(op, acc, widen(dt, ins[j], i))
		}
		if op == Avg {
			acc /= float32(k)
		}
		if k == 1 {
			copy(out[2*i:2*i+2], ins[0][2*i:])
			continue
		}
		narrow(dt, out, i, acc)
	}
	return out
}

// eachNaryShape calls f with every input count k from 1 to maxK and
// every length of lengths, and long too for k 3 and maxK.
func eachNaryShape(maxK int, lengths []int, long int, f func(k, n int)) {
	for k := 1; k <= maxK; k++ {
		ls := lengths
		if k == 3 || k == maxK {
			ls = append(ls[:len(ls):len(ls)], long)
		}
		for _, n := range ls {
			f(k, n)
		}
	}
}

// TestReduceNMisuse checks that ReduceN panics, naming the problem, on
// arguments Reduce would refuse too, and ReduceNWide (wide) on those and
// on a type and op that do not accumulate in float32.
func TestReduceNMisuse(t *testing.T) {
	four := func() []byte { return make([]byte, 4) }
	tests := []struct {
		name string
		wide bool
		dt   DType
		op   Op
		dst  []byte
		ins  [][]byte
		msg  string
	}{
		{"no inputs", false, Float32, Sum, four(), nil, "no inputs"},
		{"short input", false, Float32, Sum, four(), [][]byte{four(), four(), make([]byte, 8)}, "length mismatch"},
		{"partial element", false, Float64, Sum, four(), [][]byte{four(), four(), four()}, "not a multiple"},
		{"invalid dtype", false, 0, Sum, four(), [][]byte{four(), four(), four()}, "invalid dtype"},
		{"invalid op", false, Int32, 0, four(), [][]byte{four(), four(), four()}, "invalid dtype/op"},
		{"exact sum of floats", false, Float32, ExactSum, four(), [][]byte{four(), four(), four()}, "use Exact"},
		{"wide float32", true, Float32, Sum, four(), [][]byte{four(), four(), four()}, "does not accumulate in float32"},
		{"wide bfloat16 max", true, BFloat16, Max, four(), [][]byte{four(), four(), four()}, "does not accumulate in float32"},
		{"wide no inputs", true, Float16, Sum, four(), nil, "no inputs"},
		{"wide short input", true, BFloat16, Sum, four(), [][]byte{four(), make([]byte, 2)}, "length mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !bytes.Contains([]byte(s), []byte(tt.msg)) {
					t.Errorf("panic %v, want one saying %q", r, tt.msg)
				}
			}()
			if tt.wide {
				ReduceNWide(tt.dt, tt.op, tt.dst, tt.ins)
				return
			}
			ReduceN(tt.dt, tt.op, tt.dst, tt.ins)
		})
	}
}

// TestReduceNDoesNotAllocate: the single copy calls ReduceN once per
// allreduce; up to naryInline inputs it allocates nothing.
func TestReduceNDoesNotAllocate(t *testing.T) {
	for _, dt := range []DType{Float32, Float64, Int32, BFloat16} {
		ins := make([][]byte, 16)
		for j := range ins {
			ins[j] = benchValues(dt, 1<<14+dt.Size(), int64(j))
		}
		dst := make([]byte, len(ins[0]))
		if a := testing.AllocsPerRun(10, func() { ReduceN(dt, Sum, dst, ins) }); a != 0 {
			t.Errorf("%v: %v allocations per call", dt, a)
		}
	}
}

// FuzzReduceN compares ReduceN with the chained Reduce on arbitrary
// bytes: the first picks the dtype and op, the second the number of
// inputs (1 to 17) and the third the inputs' offsets; the rest are the
// inputs, element by element in turn.
func FuzzReduceN(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		dt := allDTypes[int(data[0])%len(allDTypes)]
		ops := naryOps(dt)
		op := ops[int(data[0]>>4)%len(ops)]
		k := 1 + int(data[1])%17
		seed := int64(data[2])
		data = data[3:]
		es := dt.Size()
		count := len(data) / (k * es)
		rows := make([][]byte, k)
		for j := range rows {
			rows[j] = make([]byte, count*es)
			for i := 0; i < count; i++ {
				copy(rows[j][i*es:(i+1)*es], data[(i*k+j)*es:])
			}
		}
		rng := rand.New(rand.NewSource(seed))
		offs := make([]int, k+1)
		for j := range offs {
			offs[j] = randOffset(rng, dt)
		}
		for _, l := range levels() {
			useLevel(t, l)
			checkReduceN(t, dt, op, rows, offs, naryAlias(seed%3))
		}
	})
}

// FuzzReduceNWide compares ReduceNWide with the wide ring's chain of
// kernel calls (wideChainReduce, itself checked against a float32 loop
// that rounds once) on arbitrary bytes, at every kernel level: the first
// byte picks Float16 or BFloat16 (bit 0) and Sum, Avg or Prod (the rest),
// the second the number of inputs (1 to 17), the third the seed of the
// offsets and of where dst is; the rest are the inputs, element by
// element in turn.
func FuzzReduceNWide(f *testing.F) {
	dts := []DType{Float16, BFloat16}
	ops := []Op{Sum, Avg, Prod}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		dt := dts[data[0]&1]
		op := ops[int(data[0]>>1)%len(ops)]
		k := 1 + int(data[1])%17
		seed := int64(data[2])
		data = data[3:]
		count := len(data) / (2 * k)
		rows := make([][]byte, k)
		for j := range rows {
			rows[j] = make([]byte, 2*count)
			for i := range count {
				copy(rows[j][2*i:2*i+2], data[2*(i*k+j):])
			}
		}
		for _, l := range levels() {
			useLevel(t, l)
			checkReduceNWide(t, rand.New(rand.NewSource(seed)), dt, op, rows)
		}
	})
}

// BenchmarkReduceN reduces k 64 KiB float32 (and float64) blocks into
// one, as the single copy does with a rank's block of k ranks' buffers:
// ReduceN against the chain of two-operand Reduce calls through a
// 64 KiB scratch that the single copy used before it. MB/s is of the
// 64 KiB written.
func BenchmarkReduceN(b *testing.B) {
	const size = 64 << 10
	for _, dt := range []DType{Float32, Float64} {
		for _, k := range []int{2, 4, 8, 16} {
			ins := make([][]byte, k)
			for j := range ins {
				ins[j] = benchValues(dt, size, int64(j))
			}
			dst := make([]byte, size)
			b.Run(fmt.Sprintf("%v/k=%d/nary", dt, k), func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					ReduceN(dt, Sum, dst, ins)
				}
			})
			scratch := make([]byte, size)
			b.Run(fmt.Sprintf("%v/k=%d/chain", dt, k), func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					if k == 2 {
						Reduce(dt, Sum, dst, ins[0], ins[1])
						continue
					}
					Reduce(dt, Sum, scratch, ins[k-2], ins[k-1])
					for j := k - 3; j > 0; j-- {
						Reduce(dt, Sum, scratch, ins[j], scratch)
					}
					Reduce(dt, Sum, dst, ins[0], scratch)
				}
			})
		}
	}
}
