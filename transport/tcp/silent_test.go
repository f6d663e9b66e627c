package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

// The silent-host test runs its far rank in a child process inside a
// network namespace; this is that child.
func TestMain(m *testing.M) {
	if addr := os.Getenv("GOCOLL_SILENT_CHILD_STORE"); addr != "" {
		os.Exit(silentChild(addr, os.Getenv("GOCOLL_SILENT_CHILD_HOST")))
	}
	os.Exit(m.Run())
}

func silentChild(store, host string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bootstrap.Dial(ctx, store, []byte(silentToken))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	t, err := tcp.Connect(ctx, c, 1, 2, []byte(silentToken), tcp.Options{ListenHost: host, SilentPeer: 3 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer t.Close()
	fmt.Println("connected")
	time.Sleep(time.Minute) // the parent kills us long before
	return 0
}

const silentToken = "silent-host-token"

// TestSilentPeerHost: a peer whose host goes silent (here: its network
// link goes down inside its namespace, so no reset and no FIN ever comes,
// as when a machine loses power) is declared lost after SilentPeer, not
// after the kernel's 15-minute retransmission limit. The link is idle when
// it goes quiet, so the kernel's keepalive probes are what notice.
// Needs root and iproute2 (CI has both).
func TestSilentPeerHost(t *testing.T) {
	ns, local, remote := netnsPair(t)
	srv, err := bootstrap.Listen(local+":0", []byte(silentToken))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	child := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "GOCOLL_SILENT_CHILD_STORE="+srv.Addr(), "GOCOLL_SILENT_CHILD_HOST="+remote)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	store, err := bootstrap.Dial(ctx, srv.Addr(), []byte(silentToken))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const silent = 3 * time.Second
	tr, err := tcp.Connect(ctx, store, 0, 2, []byte(silentToken), tcp.Options{ListenHost: local, SilentPeer: silent})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// The link works before it goes quiet.
	if err := tr.Send(ctx, 1, []byte("hello")); err != nil {
		t.Fatalf("send before the silence: %v", err)
	}

	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "gcsilent0", "down")
	start := time.Now()
	_, err = tr.Recv(ctx, 1)
	took := time.Since(start)
	if !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), "silent") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("after %v: %v, want ErrPeerLost naming rank 1 and saying its host went silent", took, err)
	}
	// Keepalive probes start after SilentPeer/3 and TCP_USER_TIMEOUT
	// ends them at SilentPeer; allow for a loaded machine.
	if took < silent/2 || took > 5*silent {
		t.Errorf("declared lost after %v, want about %v", took, silent)
	}
	t.Logf("silent host declared lost after %v (SilentPeer %v): %v", took.Round(time.Millisecond), silent, err)
}

// netnsPair makes a network namespace joined to this one by a veth pair,
// with addresses from 198.18.0.0/15, and removes both when the test ends.
// The namespace's end of the pair is named gcsilent0.
func netnsPair(t *testing.T) (ns, local, remote string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test makes a network namespace: run it as root (CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("this test needs iproute2's ip (apt-get install iproute2)")
	}
	pid := os.Getpid()
	ns = fmt.Sprintf("gocoll-silent-%d", pid)
	hostEnd := fmt.Sprintf("gcs%d", pid%1_000_000)
	// A /30 of 198.19.0.0/16 picked by pid, so that tests running side
	// by side do not share a subnet.
	prefix := fmt.Sprintf("198.19.%d.", (pid/64)%256)
	local = prefix + fmt.Sprint((pid%64)*4+1)
	remote = prefix + fmt.Sprint((pid%64)*4+2)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostEnd).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run(t, "ip", "link", "add", hostEnd, "type", "veth", "peer", "name", "gcsilent0", "netns", ns)
	run(t, "ip", "addr", "add", local+"/30", "dev", hostEnd)
	run(t, "ip", "link", "set", hostEnd, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", remote+"/30", "dev", "gcsilent0")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "gcsilent0", "up")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	return ns, local, remote
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
