//go:build amd64 && !purego

package reduce

// exactF32AVX2 is exactF32's fast path over whole groups of eight
// elements from lo to at most hi, the state of each group in registers
// (exact_amd64.s); ins points at n input pointers. It returns where it
// stopped: hi rounded down to a group, or the first group it left to the
// Go code because an element of it is outside the window.
//
//go:noescape
func exactF32AVX2(out *float32, ins **float32, n, lo, hi int, w int32) int

// exactF32Vec runs exactF32's fast path from element lo at the active
// level (AVX2 and up), as far as exactF32AVX2 goes, and returns where it
// stopped (lo itself without a kernel).
func exactF32Vec(out []float32, ins []*float32, lo int, w int32) int {
	if activeLevel < levelAVX2 || len(out)-lo < 8 {
		return lo
	}
	return exactF32AVX2(&out[0], &ins[0], len(ins), lo, len(out), w)
}
