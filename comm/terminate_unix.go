//go:build unix

package comm

import (
	"os"
	"syscall"
)

// terminate ends this process as a launcher would end a rank: with SIGTERM,
// which a program may catch to shut down in order.
func terminate() { syscall.Kill(os.Getpid(), syscall.SIGTERM) }
