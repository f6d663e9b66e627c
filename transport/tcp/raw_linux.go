package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls below are made on non-blocking sockets on the busy-polling
// path, so they return at once. They skip the runtime's blocking-syscall
// bookkeeping (entersyscall/exitsyscall), which a path making a call every
// microsecond or two cannot afford, and which invites the scheduler to
// hand this thread's P to another thread in the middle of a spin. Blocking polls still go through
// unix.Poll, so a parked rank never holds up the Go scheduler.

func errnoErr(e unix.Errno) error {
	switch e {
	case 0:
		return nil
	case unix.EAGAIN:
		return unix.EAGAIN
	case unix.EINTR:
		return unix.EINTR
	}
	return e
}

// readNB is read(2) on a non-blocking fd.
func readNB(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// writevNB is writev(2) of up to three buffers on a non-blocking fd.
func writevNB(fd int, bufs [][]byte) (int, error) {
	var iov [3]unix.Iovec
	k := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if k == len(iov) {
			break
		}
		iov[k].Base = &b[0]
		iov[k].SetLen(len(b))
		k++
	}
	if k == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// pollNow is poll(2) with a zero timeout.
func pollNow(fds []unix.PollFd) (int, error) {
	var ts unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}
