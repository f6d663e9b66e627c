package tcp

import (
	"time"

	"golang.org/x/sys/unix"
)

// keepaliveTuning: macOS names the idle time TCP_KEEPALIVE, and bounds
// retransmission per socket with TCP_RXT_CONNDROPTIME (seconds), its
// nearest to Linux's TCP_USER_TIMEOUT.
func keepaliveTuning(idle, intvl int, d time.Duration) []sockopt {
	return []sockopt{
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPALIVE, value: idle, what: "TCP_KEEPALIVE"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPINTVL, value: intvl, what: "TCP_KEEPINTVL"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_KEEPCNT, value: 4, what: "TCP_KEEPCNT"},
		{level: unix.IPPROTO_TCP, name: unix.TCP_RXT_CONNDROPTIME, value: max(int(d/time.Second), 1), what: "TCP_RXT_CONNDROPTIME", bestEffort: true},
	}
}
