//go:build linux

package tcp_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport/tcp"
)

// knockAsNobody connects to each TCP address as uid nobody and reports,
// per address, how many bytes it read before the connection ended.
func knockAsNobody(t *testing.T, addrs ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a stranger as another user with runuser: run it as root (CI does)")
	}
	script := `
import socket, sys
out = []
for a in sys.argv[1:]:
    h, p = a.rsplit(":", 1)
    s = socket.create_connection((h, int(p)), timeout=10)
    s.settimeout(10)
    n = 0
    try:
        s.sendall(b"GCOL")
        while True:
            b = s.recv(4096)
            if not b:
                break
            n += len(b)
    except OSError as e:
        out.append("%s:%s" % (type(e).__name__, n))
        continue
    out.append("eof:%d" % n)
print(" ".join(out))
`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "runuser", append([]string{"-u", "nobody", "--", "/usr/bin/python3", "-c", script}, addrs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("the stranger: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestTokenlessJobRefusesOtherUsers is issue 41's first finding on one
// host: a job with no token (torchrun's or mpirun's recipe) and a process of
// another user that connects to its store and to a rank's data port. Both
// cut it off before saying a byte (not even the handshake's hello), count
// it, and the job connects.
func TestTokenlessJobRefusesOtherUsers(t *testing.T) {
	srv, err := bootstrap.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stores := make([]*bootstrap.Client, 2)
	for r := range stores {
		if stores[r], err = bootstrap.Dial(ctx, srv.Addr(), nil); err != nil {
			t.Fatal(err)
		}
		defer stores[r].Close()
	}
	type res struct {
		tr  *tcp.Transport
		err error
	}
	first := make(chan res, 1)
	go func() { tr, err := tcp.Connect(ctx, stores[0], 0, 2, nil, tcp.Options{}); first <- res{tr, err} }()
	addr, err := stores[1].Get(ctx, "tcp/addr/0")
	if err != nil {
		t.Fatal(err)
	}
	// Cut off having read nothing: an end of stream, or a reset (what
	// the stranger sent was never read).
	got := strings.Fields(knockAsNobody(t, srv.Addr(), string(addr)))
	if len(got) != 2 {
		t.Fatalf("the stranger said %q", got)
	}
	for i, g := range got {
		if g != "eof:0" && g != "ConnectionResetError:0" && g != "BrokenPipeError:0" {
			t.Errorf("from %s the stranger got %q, want to be cut off with nothing read", []string{"the store", "rank 0"}[i], g)
		}
	}
	if n := srv.Refused(); n != 1 {
		t.Errorf("the store refused %d connections, want 1", n)
	}
	second, err := tcp.Connect(ctx, stores[1], 1, 2, nil, tcp.Options{})
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
}
