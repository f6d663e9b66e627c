//go:build unix && !linux

package main

import "syscall"

// rankSysProcAttr puts a rank in a process group of its own, so that one
// kill(-pgid) reaches everything it started. There is no portable way to
// have the kernel stop the rank when grun dies, so a grun killed with
// SIGKILL leaves its ranks running on these systems.
func rankSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
