//go:build unix && !linux

package tcp

import "golang.org/x/sys/unix"

// The non-blocking calls of the busy-polling path, through x/sys/unix's
// ordinary wrappers: raw system calls are Linux's (raw_linux.go), and
// macOS allows none but through its C library.

// readNB is read(2) on a non-blocking fd.
func readNB(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := unix.Read(fd, b)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// writevNB writes up to three buffers on a non-blocking fd, in order, as
// writev(2) would but one write(2) each (x/sys/unix has no writev here).
// Like writev it reports the bytes written, and an error only when none
// were.
func writevNB(fd int, bufs [][]byte) (int, error) {
	written, k := 0, 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if k == 3 {
			break
		}
		k++
		n, err := unix.Write(fd, b)
		if n > 0 {
			written += n
		}
		if err != nil || n < len(b) {
			if written > 0 {
				return written, nil
			}
			return 0, err
		}
	}
	return written, nil
}

// pollNow is poll(2) with a zero timeout.
func pollNow(fds []unix.PollFd) (int, error) {
	return unix.Poll(fds, 0)
}
