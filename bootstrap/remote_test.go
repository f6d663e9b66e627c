//go:build linux

package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHelperRemoteRank is not a test: TestTokenlessRemoteRank runs the
// test binary as a rank on another host (a network namespace), and this is
// that rank. It joins the store at GOCOLL_TEST_STORE and says how it went.
func TestHelperRemoteRank(t *testing.T) {
	addr := os.Getenv("GOCOLL_TEST_STORE")
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, nil)
	if err == nil {
		err = c.Join(ctx, 1, 2, "torchrun test attempt 0")
		c.Close()
	}
	fmt.Printf("refused=%v err=%v\n", errors.Is(err, ErrJoinRefused), err)
}

// TestTokenlessRemoteRank: rank 0 serves the store of a job without
// GRUN_TOKEN and a rank joins from another host (a network namespace the
// test makes). Under torchrun or Open MPI it is refused, told in one line
// to set GRUN_TOKEN or GOCOLL_INSECURE=1; with GOCOLL_INSECURE=1, and under
// Slurm, it joins. A rank of this host joins in every case.
func TestTokenlessRemoteRank(t *testing.T) {
	ns, local, _ := netnsPair(t)
	tests := []struct {
		name     string
		source   string
		insecure bool
		refused  bool
	}{
		{"torchrun", "torchrun", false, true},
		{"openmpi", "openmpi", false, true},
		{"torchrun, GOCOLL_INSECURE=1", "torchrun", true, false},
		{"slurm", "slurm", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Rank: 0, Size: 2, Addr: local + ":0", Serve: true, Source: tt.source, Job: "torchrun test attempt 0", Insecure: tt.insecure}
			srv, err := ServeFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestHelperRemoteRank$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GOCOLL_TEST_STORE="+srv.Addr())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the remote rank: %v\n%s", err, out)
			}
			said := string(out)
			if tt.refused {
				if !strings.Contains(said, "refused=true") || !strings.Contains(said, "no GRUN_TOKEN") ||
					!strings.Contains(said, "GRUN_TOKEN=$(od") || !strings.Contains(said, "GOCOLL_INSECURE=1") {
					t.Fatalf("the remote rank said:\n%s\nwant refused, told to set GRUN_TOKEN or GOCOLL_INSECURE=1", said)
				}
				if srv.Refused() != 1 {
					t.Errorf("the store refused %d, want 1", srv.Refused())
				}
			} else if !strings.Contains(said, "refused=false err=<nil>") {
				t.Fatalf("the remote rank said:\n%s\nwant it joined", said)
			}
			// A rank of this host, dialing the same address.
			c, err := Dial(ctx, srv.Addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Join(ctx, 0, 2, cfg.Job); err != nil {
				t.Fatalf("a rank of this host: %v", err)
			}
		})
	}
}

// netnsPair makes a network namespace joined to this one by a veth pair,
// with addresses from 198.18.0.0/15, and removes both when the test ends.
func netnsPair(t *testing.T) (ns, local, remote string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test makes a network namespace: run it as root (CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("this test needs iproute2's ip (apt-get install iproute2)")
	}
	pid := os.Getpid()
	ns = fmt.Sprintf("gocoll-remote-%d", pid)
	hostEnd := fmt.Sprintf("gcr%d", pid%1_000_000)
	// A /30 of 198.18.0.0/16 picked by pid, so that tests running side
	// by side do not share a subnet.
	prefix := fmt.Sprintf("198.18.%d.", 128+(pid/64)%128)
	local = prefix + fmt.Sprint((pid%64)*4+1)
	remote = prefix + fmt.Sprint((pid%64)*4+2)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostEnd).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run(t, "ip", "link", "add", hostEnd, "type", "veth", "peer", "name", "gcremote0", "netns", ns)
	run(t, "ip", "addr", "add", local+"/30", "dev", hostEnd)
	run(t, "ip", "link", "set", hostEnd, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", remote+"/30", "dev", "gcremote0")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "gcremote0", "up")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	return ns, local, remote
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
