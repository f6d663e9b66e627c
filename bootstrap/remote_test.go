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

	"github.com/gocoll/gocoll/internal/auth"
)

// TestHelperRemoteRank is not a test: TestTokenlessRemoteRank runs the
// test binary as a rank on another host (a network namespace), and this is
// that rank. It joins the store at GOCOLL_TEST_STORE, with a munge
// credential from munged at GOCOLL_TEST_MUNGE if set, and says how it
// went and the link token it got.
func TestHelperRemoteRank(t *testing.T) {
	addr := os.Getenv("GOCOLL_TEST_STORE")
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := Config{Addr: addr, Job: remoteJob}
	if sock := os.Getenv("GOCOLL_TEST_MUNGE"); sock != "" {
		cfg.Munge, cfg.MungeSocket = true, sock
	}
	c, err := DialJob(ctx, cfg)
	var token []byte
	if err == nil {
		token = c.LinkToken()
		err = c.Join(ctx, 1, 2, remoteJob)
		c.Close()
	}
	fmt.Printf("refused=%v denied=%v token=%x err=%v\n", errors.Is(err, ErrJoinRefused), errors.Is(err, auth.ErrDenied), token, err)
}

// remoteJob is the job of TestTokenlessRemoteRank.
const remoteJob = "slurm 77.0"

// TestTokenlessRemoteRank: rank 0 serves the store of a job without
// GRUN_TOKEN and a rank joins from another host (a network namespace the
// test makes). Under torchrun or Open MPI it is refused, told in one line
// to set GRUN_TOKEN or GOCOLL_INSECURE=1; with GOCOLL_INSECURE=1 it joins.
// Under Slurm it joins with a munge credential (from a munged of the
// test's own), and is refused once that munged has stopped, told to start
// munged or set GRUN_TOKEN. A rank of this host joins in every case, and
// every rank admitted gets the same link token: the job's secret.
func TestTokenlessRemoteRank(t *testing.T) {
	ns, local, _ := netnsPair(t)
	socket, stopMunged := startMunged(t)
	tests := []struct {
		name     string
		source   string
		insecure bool
		munge    bool // the ranks have munge at socket; stopMunged before
		stop     bool
		refused  []string // what the refusal says; nil: admitted
	}{
		{"torchrun", "torchrun", false, false, false, []string{"no GRUN_TOKEN", "GRUN_TOKEN=$(od", "GOCOLL_INSECURE=1"}},
		{"openmpi", "openmpi", false, false, false, []string{"no GRUN_TOKEN", "GRUN_TOKEN=$(od", "GOCOLL_INSECURE=1"}},
		{"torchrun, GOCOLL_INSECURE=1", "torchrun", true, false, false, nil},
		{"slurm, munge", "slurm", false, true, false, nil},
		{"slurm, munged stopped", "slurm", false, true, true, []string{"without a munge credential", "start munged", "GRUN_TOKEN", "GOCOLL_INSECURE=1", "Did you start munged?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.stop {
				stopMunged()
			}
			cfg := Config{Rank: 0, Size: 2, Addr: local + ":0", Serve: true, Source: tt.source, Job: remoteJob, Insecure: tt.insecure}
			if tt.munge {
				cfg.Munge, cfg.MungeSocket = true, socket
			}
			srv, err := ServeFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestHelperRemoteRank$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GOCOLL_TEST_STORE="+srv.Addr())
			if tt.munge {
				cmd.Env = append(cmd.Env, "GOCOLL_TEST_MUNGE="+socket)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the remote rank: %v\n%s", err, out)
			}
			said := string(out)
			// A rank of this host, dialing the same address.
			cfg.Addr = srv.Addr()
			c, err := DialJob(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Join(ctx, 0, 2, cfg.Job); err != nil {
				t.Fatalf("a rank of this host: %v", err)
			}
			if tt.refused != nil {
				for _, w := range append([]string{"refused=true denied=true"}, tt.refused...) {
					if !strings.Contains(said, w) {
						t.Fatalf("the remote rank said:\n%s\nwant refused, saying %q", said, w)
					}
				}
				// The store counts a refusal once it has told the rank.
				eventually(t, "the store counts the refusal", func() bool { return srv.Refused() == 1 })
			} else if want := fmt.Sprintf("refused=false denied=false token=%x err=<nil>", c.LinkToken()); !strings.Contains(said, want) {
				t.Fatalf("the remote rank said:\n%s\nwant it joined with the job's secret, %q", said, want)
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
