//go:build amd64 && !purego

package reduce

// exactAccF32AVX2 is exactF32's accumulation step, four elements at a
// time (exact_amd64.s); n is a multiple of 4.
//
//go:noescape
func exactAccF32AVX2(s *float64, mx, mn *uint32, x *float32, n int)

// exactAccF32Vec runs the accumulation step of exactF32 over the longest
// prefix of x it has a kernel for, at the active level (AVX2 and up),
// and returns its length; the Go loop does the rest.
func exactAccF32Vec(s []float64, mx, mn []uint32, x []float32) int {
	k := len(x) &^ 3
	if activeLevel < levelAVX2 || k == 0 {
		return 0
	}
	_, _, _ = s[k-1], mx[k-1], mn[k-1]
	exactAccF32AVX2(&s[0], &mx[0], &mn[0], &x[0], k)
	return k
}

// exactFinishF32AVX2 is exactF32's finishing step, four elements at a
// time (exact_amd64.s); n is a multiple of 4.
//
//go:noescape
func exactFinishF32AVX2(out *float32, s *float64, mx, mn *uint32, n int, w int32, flags *uint8) uint32

// exactFinishF32Vec runs the finishing step of exactF32 over the longest
// prefix it has a kernel for and returns its length and the OR of the
// flags it set (flags[g] bit b: element 4g+b needs exactElemF32).
func exactFinishF32Vec(out []float32, s []float64, mx, mn []uint32, w int32, flags []uint8) (int, uint32) {
	k := len(out) &^ 3
	if activeLevel < levelAVX2 || k == 0 {
		return 0, 0
	}
	_, _, _, _, _ = s[k-1], mx[k-1], mn[k-1], out[k-1], flags[k/4-1]
	return k, exactFinishF32AVX2(&out[0], &s[0], &mx[0], &mn[0], k, w, &flags[0])
}
