//go:build !amd64 || purego

package reduce

// exactAccF32Vec: no kernel here; the Go loop does it all.
func exactAccF32Vec(s []float64, mx, mn []uint32, x []float32) int { return 0 }

// exactFinishF32Vec: no kernel here; the Go loop does it all.
func exactFinishF32Vec(out []float32, s []float64, mx, mn []uint32, w int32, flags []uint8) (int, uint32) {
	return 0, 0
}
