//go:build freebsd || netbsd || dragonfly

package tcp

import (
	"time"

	"golang.org/x/sys/unix"
)

// keepaliveTuning: the BSDs have Linux's three keepalive options, and no
// per-socket retransmission limit.
func keepaliveTuning(idle, intvl int, d time.Duration) []sockopt {
	return []sockopt{
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPIDLE, value: idle, what: "TCP_KEEPIDLE"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPINTVL, value: intvl, what: "TCP_KEEPINTVL"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPCNT, value: 4, what: "TCP_KEEPCNT"},
	}
}
