package mesh

import "golang.org/x/sys/unix"

// YieldCPU gives this thread's CPU to whatever else is runnable on it, in
// any process: on a crowded host the peer a waiting rank polls for is
// often queued behind it. shared says the peer is a goroutine of this
// process (comm.NewLocal, tests).
//
// The yield to a peer in another process is raw: the runtime does not
// see it. Through syscall.Syscall the runtime counts a yield as a
// blocking system call, and a yield that lets another process run for
// longer than sysmon's tick (on a crowded host, most of them) gets its
// P taken and handed to another thread, which the yielding thread must
// then take back: context switches for nothing, on every wait. A yield
// waits for no event, so no other goroutine waits on it for longer than
// the scheduler keeps this thread off its CPU, which a preempted thread
// costs them as well.
//
// A peer in this process is the opposite case: it runs only once it has
// a P, and the P that sysmon takes from a long yield is what lets it run
// at once. The measurements of both cases are in docs/performance.md
// ("A yield the runtime does not see").
func YieldCPU(shared bool) {
	if shared {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
