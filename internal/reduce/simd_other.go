//go:build !amd64 || purego

package reduce

// Only the portable Go loops exist here (arm64 included: the Go loops are
// what serves it for now).
var (
	asmKernels  []asmKernel
	wideKernels []wideKernel
)

func detectCPU() (level, feature) { return levelGo, 0 }
