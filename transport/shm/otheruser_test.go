//go:build linux

package shm_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport/shm"
)

// TestOtherUserRefused: a process of another user (uid nobody) connects to
// a rank's abstract socket, with the job's token even: the rank cuts it off
// by its uid (SO_PEERCRED) before it says a byte, counts it, and the job
// still links.
func TestOtherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a stranger as another user with runuser: run it as root (CI does)")
	}
	token := []byte("the job's token, known to all...")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stores := make([]*bootstrap.Client, 2)
	for r := range stores {
		if stores[r], err = bootstrap.Dial(ctx, srv.Addr(), token); err != nil {
			t.Fatal(err)
		}
		defer stores[r].Close()
	}
	type res struct {
		tr  *shm.Transport
		err error
	}
	first := make(chan res, 1)
	go func() { tr, err := shm.Connect(ctx, stores[0], 0, 2, token, shm.Options{}); first <- res{tr, err} }()
	name, err := stores[1].Get(ctx, "shm/addr/0")
	if err != nil {
		t.Fatal(err)
	}
	script := `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect("\0" + sys.argv[1][1:])
n = 0
try:
    s.sendall(b"GCOL")
    while True:
        b = s.recv(4096)
        if not b:
            break
        n += len(b)
    print("eof:%d" % n)
except OSError as e:
    print("%s:%d" % (type(e).__name__, n))
`
	out, err := exec.CommandContext(ctx, "runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", script, string(name)).CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || (got != "eof:0" && got != "ConnectionResetError:0" && got != "BrokenPipeError:0") {
		t.Fatalf("the stranger: %q, %v; want cut off with nothing read", got, err)
	}
	second, err := shm.Connect(ctx, stores[1], 1, 2, token, shm.Options{})
	if err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	defer second.Close()
	r0 := <-first
	if r0.err != nil {
		t.Fatalf("rank 0: %v", r0.err)
	}
	defer r0.tr.Close()
	if n := r0.tr.Refused(); n != 1 {
		t.Errorf("rank 0 refused %d connections, want 1", n)
	}
	if err := exchange(ctx, []*shm.Transport{r0.tr, second}, 0, 1); err != nil {
		t.Fatalf("the job after the stranger: %v", err)
	}
}
