//go:build !linux

package wiring

// CPUList is the CPUs this process may run on; "" where the kernel is not
// asked.
func CPUList() string { return "" }
