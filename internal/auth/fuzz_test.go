//go:build linux

package auth

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair is a connected pair of Unix stream sockets: real, buffered
// and fast enough to set up for every input.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// FuzzHandshake plays a stranger who sends arbitrary bytes, then hangs up,
// to either end of a handshake: it is refused with ErrDenied, ErrProtocol
// or a short read, never accepted, and never waits for its deadline.
func FuzzHandshake(f *testing.F) {
	good := helloFor("GCOL", Version, uint16(Store), 9)
	f.Add(good, false)
	f.Add(append(good, make([]byte, macLen)...), false)
	f.Add(append(good, make([]byte, macLen)...), true)
	f.Add(helloFor("GCOL", Version, uint16(Store), 0), true)
	f.Add(helloFor("GCOL", 1, uint16(Store), 7), false)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, in []byte, dialer bool) {
		ours, theirs := socketPair(t)
		go func() {
			theirs.Write(in)
			theirs.(*net.UnixConn).CloseWrite()
			io.Copy(io.Discard, theirs)
		}()
		start := time.Now()
		err := Handshake(ours, []byte("the job's token, 32 bytes long.."), Store, dialer, start.Add(5*time.Second))
		switch {
		case err == nil:
			t.Fatalf("accepted a stranger's % x", in)
		case time.Since(start) > 4*time.Second:
			t.Fatalf("waited %v for a stranger who had hung up: %v", time.Since(start), err)
		case !errors.Is(err, ErrDenied) && !errors.Is(err, ErrProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
			t.Fatalf("refused with %v, want ErrDenied, ErrProtocol or a short read", err)
		}
	})
}
