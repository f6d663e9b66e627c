//go:build !(amd64 || arm64) || purego

package shm

// relax is the spin-wait hint where there is none to give (see
// relax_asm.go): polling goes on at full speed.
func relax(uint32) {}
