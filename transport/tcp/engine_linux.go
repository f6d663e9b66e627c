package tcp

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The Linux side of the engine: the per-socket silence limits
// watchSilence sets and an eventfd to wake a blocking poll (the yield of
// a crowded wait is internal/mesh's). The other Unix systems have theirs
// in engine_other.go.

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

// The bell lets ranks wait for their sockets without holding a thread
// each: one epoll instance for the whole process, holding every link of
// the engines that use it (edge-triggered, so a socket nobody reads does
// not ring again), itself registered with the Go runtime's netpoller.
// One goroutine parks on it and, as sockets stir, tells their engines
// (ring); a waiting call parks on its engine's channel, as on any Go
// socket, where poll(2) would block in a system call. It serves only a
// process holding more engines than Ps (see pass): there each blocked
// poll tied up a P until the runtime took it back, and a thousand ranks
// in one process spent more time waiting for a P than working.
type bell struct {
	epfd  int
	mu    sync.Mutex
	ids   map[uint32]*Transport
	next  uint32
	err   error // the bell could not be built: poll(2) it is
	start sync.Once
}

var theBell bell

// bellFor returns the process's bell, building it on first use.
func bellFor() (*bell, error) {
	b := &theBell
	b.start.Do(func() {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err == nil {
			err = unix.SetNonblock(epfd, true)
		}
		var f *os.File
		var rc syscall.RawConn
		if err == nil {
			f = os.NewFile(uintptr(epfd), "tcp-bell")
			// A file the netpoller does not hold has no deadlines.
			if err = f.SetReadDeadline(time.Time{}); err == nil {
				rc, err = f.SyscallConn()
			}
		}
		if err != nil {
			if f != nil {
				f.Close()
			} else if epfd >= 0 {
				unix.Close(epfd)
			}
			b.err = fmt.Errorf("tcp: bell: %w", err)
			return
		}
		b.epfd, b.ids = epfd, map[uint32]*Transport{}
		go b.serve(f, rc)
	})
	return b, b.err
}

// serve rings the engines whose sockets stirred, for the life of the
// process.
func (b *bell) serve(f *os.File, rc syscall.RawConn) {
	var evs [128]unix.EpollEvent
	for {
		err := rc.Read(func(uintptr) bool {
			for {
				n, err := unix.EpollWait(b.epfd, evs[:], 0)
				if err == unix.EINTR {
					continue
				}
				if err != nil || n == 0 {
					return false
				}
				b.mu.Lock()
				for _, ev := range evs[:n] {
					if t := b.ids[uint32(ev.Fd)]; t != nil {
						notify(t.ring)
					}
				}
				b.mu.Unlock()
				if n < len(evs) {
					return false
				}
			}
		})
		if err != nil {
			// Not expected (the file is never closed): the engines'
			// waits end on their timeouts instead.
			f.Close()
			return
		}
	}
}

// enroll adds to the bell the links t registered since the last call,
// tagged with t's id. Called by the progress holder.
func (b *bell) enroll(t *Transport) error {
	if t.bellID == 0 {
		b.mu.Lock()
		b.next++
		t.bellID = b.next
		b.ids[t.bellID] = t
		b.mu.Unlock()
	}
	for ; t.enrolled < len(t.list); t.enrolled++ {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(t.bellID)}
		if err := unix.EpollCtl(b.epfd, unix.EPOLL_CTL_ADD, t.list[t.enrolled].fd, &ev); err != nil {
			return err
		}
	}
	return nil
}

// leave forgets t; its sockets leave the epoll set as they close.
func (b *bell) leave(t *Transport) {
	if t.bellID != 0 {
		b.mu.Lock()
		delete(b.ids, t.bellID)
		b.mu.Unlock()
	}
}

// parkedPoll is pass's blocking poll for a process holding more engines
// than Ps: poll at once, and if nothing is ready, park until the bell
// rings for this engine (or wake does, or timeoutMs pass), then poll
// again.
func (t *Transport) parkedPoll(timeoutMs int) (int, error) {
	b, err := bellFor()
	if err != nil || b.enroll(t) != nil {
		return unix.Poll(t.pfds, timeoutMs)
	}
	if n, err := pollNow(t.pfds); n != 0 || err != nil {
		return n, err
	}
	if t.ringTimer == nil {
		t.ringTimer = time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	} else {
		t.ringTimer.Reset(time.Duration(timeoutMs) * time.Millisecond)
	}
	select {
	case <-t.ring:
	case <-t.ringTimer.C:
	}
	t.ringTimer.Stop()
	return pollNow(t.pfds)
}

func (t *Transport) leaveBell() { theBell.leave(t) }
