//go:build unix

package testprog

import (
	"errors"
	"os"
	"syscall"
)

// lockExclusive takes f's lock for this run alone, without waiting;
// errBusy if another run holds it.
func lockExclusive(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errBusy
	}
	return err
}

// lockShared turns the exclusive lock into a shared one: other runs may
// use the programs, none may rebuild them.
func lockShared(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
}
