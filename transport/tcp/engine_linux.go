package tcp

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// The Linux side of the engine: the per-socket silence limits
// watchSilence sets, an eventfd to wake a blocking poll, and sched_yield. The other Unix
// systems have theirs in engine_other.go.

// keepaliveTuning: Linux sets all three keepalive timers per socket, and
// TCP_USER_TIMEOUT declares the connection dead once data has gone
// unacknowledged for d (and then also bounds the probing).
func keepaliveTuning(idle, intvl int, d time.Duration) []sockopt {
	return []sockopt{
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPIDLE, value: idle, what: "TCP_KEEPIDLE"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPINTVL, value: intvl, what: "TCP_KEEPINTVL"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPCNT, value: 4, what: "TCP_KEEPCNT"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_USER_TIMEOUT, value: int(d / time.Millisecond), what: "TCP_USER_TIMEOUT"},
	}
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
