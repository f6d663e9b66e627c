//go:build unix && !linux

package tcp

import (
	"fmt"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The engine on Unix systems other than Linux (macOS, the BSDs): the same
// non-blocking sockets and poll(2), with portable stand-ins for what only
// Linux has. Linux's versions are in engine_linux.go.

// sockopt is one socket option watchSilence sets.
type sockopt struct {
	level, name, value int
	what               string
	// bestEffort options are skipped where the system refuses them:
	// keepalive alone still catches a silent host on an idle link.
	bestEffort bool
}

// watchSilence turns on keepalive probes from d/3 on, every d/6, four of
// them unanswered, where the system lets a socket set them
// (keepaliveTuning; elsewhere the system's own timers apply), and, where a
// socket can have one, a limit of d on retransmitting unacknowledged data.
// Without TCP_USER_TIMEOUT (FreeBSD, for one), data that a silent host
// never acknowledges is given up only at the kernel's own retransmission
// limit, and keepalive only covers an idle link.
func watchSilence(fd int, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	idle := max(int(d/3/time.Second), 1)
	intvl := max(int(d/6/time.Second), 1)
	opts := append([]sockopt{{level: unix.SOL_SOCKET, name: unix.SO_KEEPALIVE, value: 1, what: "SO_KEEPALIVE"}},
		keepaliveTuning(idle, intvl, d)...)
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil && !o.bestEffort {
			return fmt.Errorf("tcp: setsockopt %s=%d: %w", o.what, o.value, err)
		}
	}
	return nil
}

// wakePair returns the read end of a non-blocking pipe, which pass polls,
// and its write end, which wake writes to (there is no eventfd here).
func wakePair() (r, w int, err error) {
	var p [2]int
	// Under ForkLock, so that no child started meanwhile inherits the ends
	// before they are close-on-exec (pipe2 is not everywhere).
	syscall.ForkLock.RLock()
	err = unix.Pipe(p[:])
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, -1, fmt.Errorf("tcp: wake-up pipe: %w", err)
	}
	for _, fd := range p {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return -1, -1, fmt.Errorf("tcp: wake-up pipe: %w", err)
		}
	}
	return p[0], p[1], nil
}

// yieldCPU lets the other goroutines of this process run. Unlike Linux's
// sched_yield it does not hand the CPU to other processes: ranks in one
// process (comm.NewLocal, tests) still take turns, ranks in separate
// processes rely on the short crowded spin.
func yieldCPU() { runtime.Gosched() }
