package tcp

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// The Linux side of the engine: the kernel's per-socket silence limits,
// an eventfd to wake a blocking poll, and sched_yield. The other Unix
// systems have theirs in engine_other.go.

// watchSilence has the kernel declare the connection dead once the peer's
// host has been silent for d: unacknowledged data for d
// (TCP_USER_TIMEOUT), or, on an idle link, keepalive probes from d/3 on,
// every d/6, unanswered (TCP_USER_TIMEOUT then also bounds the probing).
// The engine then sees ETIMEDOUT on the socket like any other loss.
func watchSilence(fd int, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	idle := max(int(d/3/time.Second), 1)
	intvl := max(int(d/6/time.Second), 1)
	for _, o := range []struct {
		level, name, value int
		what               string
	}{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, idle, "TCP_KEEPIDLE"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, intvl, "TCP_KEEPINTVL"},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 4, "TCP_KEEPCNT"},
		{unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d / time.Millisecond), "TCP_USER_TIMEOUT"},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("tcp: setsockopt %s=%d: %w", o.what, o.value, err)
		}
	}
	return nil
}

// wakePair returns the descriptor wake writes to and pass polls: one
// eventfd, both ends at once.
func wakePair() (r, w int, err error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, -1, fmt.Errorf("tcp: eventfd: %w", err)
	}
	return fd, fd, nil
}

// yieldCPU gives this thread's CPU to whatever else is runnable on it,
// in any process.
func yieldCPU() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
