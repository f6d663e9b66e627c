package main

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// allowedCPUs lists the CPUs grun itself may run on: a job started inside
// a cpuset or under taskset binds its ranks within it.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// startOnCPU runs start, which forks a child, on a thread bound to cpu,
// so that the child starts bound (affinity is inherited across fork and
// exec) before any of its own threads exist. The thread's mask is put
// back before it is unlocked, and the thread must outlive the rank: the
// rank's Pdeathsig fires when the thread that forked it exits.
func startOnCPU(cpu int, start func() error) error {
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			runtime.UnlockOSThread()
			done <- result{fmt.Errorf("sched_getaffinity: %w", err)}
			return
		}
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			runtime.UnlockOSThread()
			done <- result{fmt.Errorf("bind to CPU %d: sched_setaffinity: %w", cpu, err)}
			return
		}
		err := start()
		restored := unix.SchedSetaffinity(0, &old) == nil
		done <- result{err}
		if !restored {
			// A locked goroutine that ends takes its thread with it, and
			// the rank with the thread; this one parks forever instead.
			select {}
		}
		runtime.UnlockOSThread()
	}()
	return (<-done).err
}
