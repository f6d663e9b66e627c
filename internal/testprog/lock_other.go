//go:build !unix

package testprog

import (
	"errors"
	"os"
)

// Without flock the kept directory could be rebuilt under a run that
// executes its programs, so every run builds into a directory of its own.
func lockExclusive(*os.File) error { return errors.ErrUnsupported }

func lockShared(*os.File) error { return errors.ErrUnsupported }
