package cma

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read copies len(dst) bytes from process pid's memory at addr into dst.
func Read(pid int, addr uintptr, dst []byte) error {
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: unsafe.SliceData(dst)}}
		local[0].SetLen(len(dst))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(dst)}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("process_vm_readv of %d bytes from pid %d: %w", len(dst), pid, err)
		case n == 0:
			return fmt.Errorf("process_vm_readv of %d bytes from pid %d read nothing: %w", len(dst), pid, unix.EFAULT)
		}
		// A partial read stops at a page the target has not mapped; the
		// next call says why.
		dst, addr = dst[n:], addr+uintptr(n)
	}
	return nil
}

// yamaScope is where the Yama module says how far ptrace reaches.
const yamaScope = "/proc/sys/kernel/yama/ptrace_scope"

// AllowReaders lets processes of this user read this process's memory
// where the Yama module restricts it to descendants (ptrace_scope 1):
// prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY), as MPI libraries that copy
// by CMA do. It says what it did, for the log. Without Yama, or at
// scope 0, there is nothing to do; at 2 and 3 nothing can be done, and
// peers' reads fail with EPERM.
func AllowReaders() (string, error) {
	b, err := os.ReadFile(yamaScope)
	if err != nil {
		return "no Yama", nil
	}
	return allowFor(strings.TrimSpace(string(b)), func() error {
		return unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
	})
}

// allowFor is AllowReaders for the Yama scope read, with the prctl call.
func allowFor(scope string, setAny func() error) (string, error) {
	switch scope {
	case "0":
		return "Yama ptrace_scope 0", nil
	case "1":
		if err := setAny(); err != nil {
			return "", fmt.Errorf("Yama ptrace_scope 1: prctl PR_SET_PTRACER_ANY: %w", err)
		}
		return "Yama ptrace_scope 1: PR_SET_PTRACER_ANY set", nil
	case "2":
		return "Yama ptrace_scope 2: only CAP_SYS_PTRACE may read another process", nil
	}
	return "Yama ptrace_scope " + scope + ": no process may read another", nil
}
