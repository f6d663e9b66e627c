package comm_test

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func init() {
	if os.Getenv("GOCOLL_ALLOC_TEST_RANK") == "refused" && os.Getenv("GRUN_RANK") == "1" {
		// No other process may read this one's memory now, short of
		// CAP_SYS_PTRACE over its user namespace, which TestRegisterRefused's
		// ranks, each in a user namespace of its own, lack.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			panic(err)
		}
	}
}

// TestRegisterRefused: where the kernel refuses one rank's reads of
// another's memory (rank 1 is not dumpable, and no rank has
// CAP_SYS_PTRACE over another's user namespace), Register still
// succeeds, every rank's allreduce of the buffer takes the usual path
// (it hands the transport its payload) with the ring's bits, and
// GOCOLL_DEBUG=info says why, on every rank alike.
func TestRegisterRefused(t *testing.T) {
	own := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
	}
	errs, outs := runRanks(t, 2, "refused", own, "GOCOLL_DEBUG=info")
	const why = `why="rank 0 cannot read rank 1's memory (process_vm_readv: operation not permitted)"`
	for r, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(outs[r], "msg=register") || !strings.Contains(outs[r], why) {
			t.Errorf("rank %d's log does not say %s:\n%s", r, why, outs[r])
		}
	}
}
