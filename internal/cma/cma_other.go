//go:build !linux

package cma

import (
	"fmt"
	"syscall"
)

// Read fails: cross-memory attach is Linux's.
func Read(pid int, addr uintptr, dst []byte) error {
	return fmt.Errorf("process_vm_readv of %d bytes from pid %d: %w", len(dst), pid, syscall.ENOSYS)
}

// AllowReaders has nothing to do where Read always fails.
func AllowReaders() (string, error) { return "not Linux", nil }
