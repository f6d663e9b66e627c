package main

import "syscall"

// rankSysProcAttr puts a rank in a process group of its own, so that one
// kill(-pgid) reaches everything it started (go run's child binary, a shell
// script's commands), and asks the kernel to SIGKILL it if grun dies without
// getting the chance to stop it (kill -9, OOM killer). Pdeathsig fires when
// the thread that forked the rank exits, not the process; the Go runtime
// only retires threads that a goroutine locked and left locked, which grun
// never does. It reaches the rank itself, not the rank's children: those
// only go away with grun when grun lives long enough to signal the group.
func rankSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
