//go:build unix && !linux && !darwin && !freebsd && !netbsd && !dragonfly

package tcp

import "time"

// keepaliveTuning: on the remaining systems (OpenBSD, Solaris, AIX, ...)
// a socket cannot set its keepalive timers; SO_KEEPALIVE alone runs on the
// system's own.
func keepaliveTuning(idle, intvl int, d time.Duration) []sockopt { return nil }
