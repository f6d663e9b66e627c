package reduce

import (
	"strconv"
	"sync"
	"unsafe"
)

// naryScratch is the size of ReduceN's scratch of partial results on
// the Go path: small enough to stay in the first-level cache with a
// piece of each input, large enough that Reduce's dispatch is nothing
// beside it. A multiple of every element size.
const naryScratch = 8 << 10

// naryScratches holds reduceChain's scratch buffers. Not on the stack:
// Reduce hands its buffers to the kernels through function values, so
// the compiler would move one to the heap on every call. uint64 words
// give alignment for every dtype.
var naryScratches = sync.Pool{New: func() any { return new([naryScratch / 8]uint64) }}

// ReduceN sets dst[i] = ins[0][i] op (ins[1][i] op (... op (ins[k-2][i] op
// ins[k-1][i]))) for the k = len(ins) inputs: the two-operand chain of
// Reduce calls acc = ins[k-2] op ins[k-1], acc = ins[j] op acc for j from
// k-3 down to 0, with the same roundings in the same order and so the
// same bits (which NaN comes out of two NaN operands aside, as between
// kernel levels), but reading each input once and writing dst once. One
// input is copied.
//
// Float32 and Float64 Sum, Avg (reduced as Sum) and Prod have vector
// kernels at the AVX2 level and above that keep the partial results in
// registers. Every other pair, and the few elements past those kernels'
// 256-byte blocks, go through the chain of Reduce calls a piece at a time,
// the partial results in a scratch buffer that stays in cache. 16-bit
// types are reduced as Reduce reduces them, rounded to 16 bits at every
// step; ReduceNWide is the chain with float32 partial results that the
// collectives take for 16-bit sums and products (wide.go).
//
// Every buffer has len(dst) bytes, a multiple of dt.Size(); dst may be
// one of ins (same start) but must not otherwise overlap them. ReduceN
// panics, as Reduce does, on no inputs, a length mismatch, an invalid dt
// or op, or ExactSum on floats.
func ReduceN(dt DType, op Op, dst []byte, ins [][]byte) {
	checkNary(dt, op, dst, ins)
	if op == ExactSum && dt.IsFloat() {
		notReduced(op)
	}
	switch len(ins) {
	case 1:
		copy(dst, ins[0])
		return
	case 2:
		Reduce(dt, op, dst, ins[0], ins[1])
		return
	}
	reduceChain(dt, op, dst, ins, naryVec(dt, op, dst, ins))
}

// checkNary panics, through badReduceN, unless ins is one or more
// buffers of len(dst) bytes, whole elements of a valid dt, and op valid.
func checkNary(dt DType, op Op, dst []byte, ins [][]byte) {
	if len(ins) == 0 || !dt.Valid() || !op.Valid() || len(dst)&(dtypeInfo[dt].size-1) != 0 {
		badReduceN(dt, op, dst, ins)
	}
	for _, in := range ins {
		if len(in) != len(dst) {
			badReduceN(dt, op, dst, ins)
		}
	}
}

// badReduceN panics with what is wrong with ReduceN's arguments.
//
//go:noinline
func badReduceN(dt DType, op Op, dst []byte, ins [][]byte) {
	if len(ins) == 0 {
		panic("reduce: ReduceN: no inputs")
	}
	for j, in := range ins {
		if len(in) != len(dst) {
			panic("reduce: ReduceN: length mismatch: dst " + strconv.Itoa(len(dst)) + ", input " + strconv.Itoa(j) + " " + strconv.Itoa(len(in)))
		}
	}
	badReduce(dt, op, dst, dst, dst)
}

// reduceChain does ReduceN's work from byte lo on, for three or more
// inputs, through Reduce, naryScratch bytes at a time: each piece of
// every input is read before the piece of dst is written, so dst may be
// any of the inputs.
func reduceChain(dt DType, op Op, dst []byte, ins [][]byte, lo int) {
	if lo == len(dst) {
		return
	}
	scratch := naryScratches.Get().(*[naryScratch / 8]uint64)
	defer naryScratches.Put(scratch)
	acc := unsafe.Slice((*byte)(unsafe.Pointer(&scratch[0])), naryScratch)
	k := len(ins)
	for lo < len(dst) {
		hi := min(lo+naryScratch, len(dst))
		a := acc[:hi-lo]
		Reduce(dt, op, a, ins[k-2][lo:hi], ins[k-1][lo:hi])
		for j := k - 3; j > 0; j-- {
			Reduce(dt, op, a, ins[j][lo:hi], a)
		}
		Reduce(dt, op, dst[lo:hi], ins[0][lo:hi], a)
		lo = hi
	}
}

// ReduceNWide is ReduceN for a 16-bit Sum, Avg or Prod accumulated in
// float32 (Wide): the steps of the collectives' wide ring for one block,
// acc = ins[k-2] op ins[k-1] in float32 (ReduceWide), acc = acc op ins[j]
// for j from k-3 down to 1 (Accumulate), and the last input added with
// the one rounding to 16 bits (AccumulateNarrow); for Avg the sum of all
// k is divided by k in float32 (Scale) before that rounding (Narrow).
// So it has the bits of that chain (which NaN comes out of two NaN
// operands aside), reading each input once and writing dst once; the
// partial results stay in a float32 scratch piece that stays in cache,
// and each step runs the wide kernels. One input is copied (it is exact
// in 16 bits; Avg by 1 changes nothing).
//
// Buffers and panics are as for ReduceN; it panics too unless Wide(dt,
// op).
func ReduceNWide(dt DType, op Op, dst []byte, ins [][]byte) {
	checkNary(dt, op, dst, ins)
	if !Wide(dt, op) {
		panic("reduce: ReduceNWide: " + dt.String() + "/" + op.String() + " does not accumulate in float32")
	}
	k := len(ins)
	if k == 1 {
		copy(dst, ins[0])
		return
	}
	scratch := naryScratches.Get().(*[naryScratch / 8]uint64)
	defer naryScratches.Put(scratch)
	acc := unsafe.Slice((*byte)(unsafe.Pointer(&scratch[0])), naryScratch)
	const piece = naryScratch / 2 // 16-bit bytes whose float32s fill acc
	for lo := 0; lo < len(dst); lo += piece {
		hi := min(lo+piece, len(dst))
		a := acc[:2*(hi-lo)]
		ReduceWide(dt, op, a, ins[k-2][lo:hi], ins[k-1][lo:hi])
		for j := k - 3; j > 0; j-- {
			Accumulate(dt, op, a, a, ins[j][lo:hi])
		}
		switch {
		case op == Avg:
			if k > 2 {
				Accumulate(dt, op, a, a, ins[0][lo:hi])
			}
			Scale(Float32, a, k)
			Narrow(dt, dst[lo:hi], a)
		case k == 2:
			Narrow(dt, dst[lo:hi], a)
		default:
			AccumulateNarrow(dt, op, dst[lo:hi], a, ins[0][lo:hi])
		}
	}
}
