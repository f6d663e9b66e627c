//go:build (amd64 || arm64) && !purego

package shm

// relax executes the CPU's spin-wait hint n times (n > 0): PAUSE on
// amd64, YIELD on arm64. Between polls of a ring it tells the core that
// this is a wait: the other hardware thread of the core gets its
// resources, leaving the loop costs no pipeline flush when the polled line
// changes, and a hypervisor sees a virtual CPU that spins (pause-loop
// exiting) and can run the one it waits for, where both share a CPU.
func relax(n uint32)
