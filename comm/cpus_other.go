//go:build !linux

package comm

// cpuList is the CPUs this process may run on; "" where the kernel is not
// asked.
func cpuList() string { return "" }
