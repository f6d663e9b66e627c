//go:build linux

package peercred

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// asNobody starts a process as uid nobody that connects and then waits a
// few seconds (or until it is killed).
func asNobody(t *testing.T, args ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a process as another user with runuser: run it as root (CI does)")
	}
	cmd := exec.Command("runuser", append([]string{"-u", "nobody", "--"}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

func accept(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(10 * time.Second):
		ln.Close()
		t.Fatal("nobody connected")
	}
	return nil
}

func TestLookup(t *testing.T) {
	me := os.Geteuid()
	tests := []struct {
		name    string
		network string
		addr    string
		nobody  func(addr string) []string // the stranger's command; nil: this process dials
		want    int
	}{
		{"tcp4, this user", "tcp", "127.0.0.1:0", nil, me},
		{"tcp6, this user", "tcp", "[::1]:0", nil, me},
		{"tcp4, nobody", "tcp", "127.0.0.1:0", func(a string) []string {
			h, p, _ := net.SplitHostPort(a)
			return []string{"bash", "-c", "exec 3<>/dev/tcp/" + h + "/" + p + "; sleep 5"}
		}, 65534},
		{"tcp6, nobody", "tcp", "[::1]:0", func(a string) []string {
			_, p, _ := net.SplitHostPort(a)
			return []string{"/usr/bin/python3", "-c", "import socket,time; s=socket.create_connection(('::1'," + p + ")); time.sleep(5)"}
		}, 65534},
		{"unix, this user", "unix", "@gocoll-peercred-test-" + strconv.Itoa(os.Getpid()), nil, me},
		{"unix, nobody", "unix", "@gocoll-peercred-test-" + strconv.Itoa(os.Getpid()), func(a string) []string {
			return []string{"/usr/bin/python3", "-c", "import socket,time; s=socket.socket(socket.AF_UNIX); s.connect('\\0" + a[1:] + "'); time.sleep(5)"}
		}, 65534},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen(tt.network, tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			if tt.nobody == nil {
				d, err := net.Dial(tt.network, ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				// The dialing end sees the listener's owner too.
				if uid, err := Lookup(d); err != nil || uid != me {
					t.Errorf("dialer's Lookup = %d, %v; want %d", uid, err, me)
				}
			} else {
				asNobody(t, tt.nobody(ln.Addr().String())...)
			}
			c := accept(t, ln)
			uid, err := Lookup(c)
			if err != nil || uid != tt.want {
				t.Fatalf("Lookup = %d, %v; want %d", uid, err, tt.want)
			}
			err = Check(c)
			if tt.want == me && err != nil || tt.want != me && !errors.Is(err, ErrOtherUser) {
				t.Fatalf("Check: %v", err)
			}
		})
	}
}

func TestParseAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"00000000000000000000000001000000:0016", "[::1]:22"},
		{"0000000000000000FFFF00000100007F:A2B4", "[::ffff:127.0.0.1]:41652"},
	}
	for _, tt := range tests {
		got, err := parseAddr(tt.in)
		if err != nil || got.String() != tt.want {
			t.Errorf("parseAddr(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "01007F:0016", "zz00007F:0016", "0100007F:10000"} {
		if _, err := parseAddr(bad); err == nil {
			t.Errorf("parseAddr(%q) succeeded", bad)
		}
	}
}
