//go:build amd64 && !purego

package reduce

import "unsafe"

// sumNF32AVX2, sumNF64AVX2, prodNF32AVX2 and prodNF64AVX2 are ReduceN's
// Sum and Prod over bytes lo to hi (whole 256-byte blocks) of every
// buffer, the partial results in registers (nary_amd64.s); ins points at
// the k >= 2 inputs' first bytes.
//
//go:noescape
func sumNF32AVX2(d *byte, ins **byte, k, lo, hi int)

//go:noescape
func sumNF64AVX2(d *byte, ins **byte, k, lo, hi int)

//go:noescape
func prodNF32AVX2(d *byte, ins **byte, k, lo, hi int)

//go:noescape
func prodNF64AVX2(d *byte, ins **byte, k, lo, hi int)

// naryInline is how many inputs naryVec takes without allocating their
// pointers.
const naryInline = 32

// naryVec runs ReduceN's vector kernel for dt and op at the active level
// (AVX2 and up), if there is one, over the longest prefix of whole
// 256-byte blocks, and returns its length in bytes (0 without a kernel):
// the chain of Reduce calls does the rest, fewer than 256 bytes.
// Like Reduce, it bounds what one kernel call reads, here to about
// kernelChunk bytes over all inputs, so that the goroutine can be
// preempted between calls.
func naryVec(dt DType, op Op, dst []byte, ins [][]byte) int {
	done := len(dst) &^ 255
	if activeLevel < levelAVX2 || op != Sum && op != Avg && op != Prod || dt != Float32 && dt != Float64 || done == 0 {
		return 0
	}
	var inline [naryInline]*byte
	ps := inline[:0]
	if len(ins) > naryInline {
		ps = make([]*byte, 0, len(ins))
	}
	for _, in := range ins {
		ps = append(ps, unsafe.SliceData(in))
	}
	step := max(kernelChunk/len(ins)&^255, 256)
	for lo := 0; lo < done; lo += step {
		d, hi := unsafe.SliceData(dst), min(lo+step, done)
		switch {
		case dt == Float32 && op == Prod:
			prodNF32AVX2(d, &ps[0], len(ps), lo, hi)
		case dt == Float32:
			sumNF32AVX2(d, &ps[0], len(ps), lo, hi)
		case op == Prod:
			prodNF64AVX2(d, &ps[0], len(ps), lo, hi)
		default:
			sumNF64AVX2(d, &ps[0], len(ps), lo, hi)
		}
	}
	return done
}
