//go:build unix && !linux

package tcp

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// The engine on Unix systems other than Linux (macOS, the BSDs): the same
// non-blocking sockets and poll(2), with portable stand-ins for what only
// Linux has. Linux's versions are in engine_linux.go.

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

// parkedPoll is Linux's (engine_linux.go): here a waiting call blocks
// in poll(2), whatever the process holds.
func (t *Transport) parkedPoll(timeoutMs int) (int, error) { return unix.Poll(t.pfds, timeoutMs) }

func (t *Transport) leaveBell() {}
