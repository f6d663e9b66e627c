//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
)

// cluster is a set of test hosts built from network namespaces: a
// "launcher" namespace holding a bridge, where grun runs and serves the
// rendezvous store, and one namespace per host, each joined to the bridge
// by a veth pair. Every address is from 198.18.0.0/15 and lives only inside
// these namespaces, so nothing of the machine's own network is touched and
// clusters of tests running side by side do not see each other.
type cluster struct {
	launcher string            // namespace grun runs in
	launchIP string            // its address on the bridge
	hosts    []string          // host addresses, as given to grun -H
	ns       map[string]string // host address -> namespace
}

// newCluster builds a cluster of n hosts and removes it, with every process
// left inside, when the test ends, whether it passed or not.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test builds test hosts from network namespaces, which needs root: run it as root (CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("this test needs iproute2's ip (apt-get install iproute2)")
	}
	// Names must be unique on the machine (namespaces are global); the
	// pid and a counter make them so.
	tag := fmt.Sprintf("gocoll-e2e-%d-%d", os.Getpid(), clusterSeq.next())
	c := &cluster{launcher: tag + "-l", launchIP: "198.18.0.1", ns: make(map[string]string)}
	all := []string{c.launcher}
	t.Cleanup(func() {
		for _, ns := range all {
			killNamespace(ns)
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	ip(t, "netns", "add", c.launcher)
	ip(t, "-n", c.launcher, "link", "set", "lo", "up")
	ip(t, "-n", c.launcher, "link", "add", "br0", "type", "bridge")
	ip(t, "-n", c.launcher, "addr", "add", c.launchIP+"/24", "dev", "br0")
	ip(t, "-n", c.launcher, "link", "set", "br0", "up")
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("%s-h%d", tag, i)
		addr := fmt.Sprintf("198.18.0.%d", i+2)
		ip(t, "netns", "add", ns)
		all = append(all, ns)
		veth := fmt.Sprintf("veth%d", i)
		ip(t, "-n", c.launcher, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ip(t, "-n", c.launcher, "link", "set", veth, "master", "br0", "up")
		ip(t, "-n", ns, "link", "set", "lo", "up")
		ip(t, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		ip(t, "-n", ns, "link", "set", "eth0", "up")
		c.hosts = append(c.hosts, addr)
		c.ns[addr] = ns
	}
	return c
}

type counter struct{ n int }

func (c *counter) next() int { c.n++; return c.n }

// clusterSeq numbers the clusters of this test process; the tests that
// build them do not run in parallel.
var clusterSeq counter

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// pids lists the processes inside namespace ns.
func pids(ns string) []int {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	var ps []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// killNamespace SIGKILLs every process inside ns: deleting a namespace
// only removes its name, and whatever runs inside would go on running.
func killNamespace(ns string) {
	for range 50 {
		ps := pids(ns)
		if len(ps) == 0 {
			return
		}
		for _, p := range ps {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkEmpty fails t if any process still runs on the cluster's hosts
// once grun has exited.
func (c *cluster) checkEmpty(t *testing.T) {
	t.Helper()
	for _, ns := range c.ns {
		if ps := pids(ns); len(ps) > 0 {
			t.Errorf("processes %v still run in %s after grun exited", ps, ns)
		}
	}
}

// rsh is the --rsh value that runs a command on a cluster host: the
// netns-rsh stand-in for ssh, which maps each host to its namespace.
func (c *cluster) rsh(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "netns-rsh"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(script, " \t") {
		t.Fatalf("--rsh is split at spaces, and the path %q holds one", script)
	}
	var m []string
	for _, h := range c.hosts {
		m = append(m, h+"="+c.ns[h])
	}
	return "sh " + script + " " + strings.Join(m, ",")
}

// grunIn starts grun inside the launcher namespace; done reports its
// combined output and exit status once it has exited, or the test fails
// after timeout.
func (c *cluster) grunIn(t *testing.T, timeout time.Duration, env []string, args ...string) (cmd *exec.Cmd, done func() (string, int)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.launcher, filepath.Join(bin, "grun")}, args...)...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0", "GOCOLL_IFACE=", "GOCOLL_DEBUG="), env...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return cmd, func() (string, int) {
		t.Helper()
		defer cancel()
		err := cmd.Wait()
		if ctx.Err() != nil {
			t.Fatalf("grun %s did not finish within %v (a hang):\n%s", strings.Join(args, " "), timeout, out.String())
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("grun: %v", err)
		}
		return out.String(), code
	}
}

// TestMultiHost runs collcheck, every collective, type and op, as 2 hosts
// x 2 ranks: two network namespaces reached through --rsh, with grun and
// its rendezvous store in a third. Every rank must report success, each
// from the host it was placed on, and grun must tell the hosts to dial the
// store at its address on their network (the bridge's, 198.18.0.1), not at
// a loopback one, whether it found that address by the route toward the
// hosts, by --iface or by GOCOLL_IFACE; GOCOLL_DEBUG=info must log the
// choice.
func TestMultiHost(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	tests := []struct {
		name  string
		env   []string
		flags []string
		how   string // chosen_by in the log; "" when GOCOLL_DEBUG is off
	}{
		{name: "route", env: []string{"GOCOLL_DEBUG=info"}, how: "the route toward each host"},
		{name: "--iface,map-by=node", flags: []string{"--iface", "br0", "--map-by", "node"}},
		{name: "GOCOLL_IFACE", env: []string{"GOCOLL_IFACE=br0", "GOCOLL_DEBUG=info"}, how: "GOCOLL_IFACE br0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-v", "-H", c.hosts[0] + ":2," + c.hosts[1] + ":2", "--rsh", c.rsh(t),
				"-x", "GOCOLL_TIMEOUT=60s"}, tc.flags...)
			_, done := c.grunIn(t, 3*time.Minute, tc.env, append(args, filepath.Join(bin, "collcheck"), "-addrs")...)
			out, code := done()
			if code != 0 {
				t.Fatalf("exit code %d:\n%s", code, out)
			}
			store := regexp.QuoteMeta(c.launchIP) + `:\d+`
			for _, h := range c.hosts {
				want := regexp.MustCompile(`grun: host ` + regexp.QuoteMeta(h) + ` \(-H\): 2 ranks, through sh .*, store at ` + store + `\n`)
				if !want.MatchString(out) {
					t.Errorf("grun -v does not say host %s dials the store at %s (%v):\n%s", h, c.launchIP, want, out)
				}
				if tc.how == "" {
					continue
				}
				logged := regexp.MustCompile(`level=INFO msg="grun: rendezvous address" lib=gocoll host=` + regexp.QuoteMeta(h) +
					` remote=true dial=` + store + ` listen=` + store + ` chosen_by="` + regexp.QuoteMeta(tc.how) + `"`)
				if !logged.MatchString(out) {
					t.Errorf("GOCOLL_DEBUG=info does not log the address for host %s (%v):\n%s", h, logged, out)
				}
			}
			if tc.how == "" && strings.Contains(out, "level=INFO") {
				t.Errorf("info logged without GOCOLL_DEBUG:\n%s", out)
			}
			for r := 0; r < 4; r++ {
				host := c.hosts[r/2]
				if slices.Contains(tc.flags, "node") {
					host = c.hosts[r%2]
				}
				if want := fmt.Sprintf("rank %d addrs %s\n", r, host); !strings.Contains(out, want) {
					t.Errorf("no %q in the output: rank %d did not run on host %s:\n%s", want, r, host, out)
				}
				if want := fmt.Sprintf("rank %d of 4: ok", r); !strings.Contains(out, want) {
					t.Errorf("no %q in the output:\n%s", want, out)
				}
			}
			c.checkEmpty(t)
		})
	}
}

// TestMultiHostUneven runs collcheck on hosts that hold different
// numbers of ranks (-H a:2,b:1): the two ranks of the first run shared
// memory between them and TCP to the third, which has TCP alone, with
// larger slots. Messages of several slots must still travel in segments
// both ends agree on.
func TestMultiHostUneven(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	_, done := c.grunIn(t, 3*time.Minute, nil, "-H", c.hosts[0]+":2,"+c.hosts[1]+":1", "--rsh", c.rsh(t),
		"-x", "GOCOLL_TIMEOUT=60s", filepath.Join(bin, "collcheck"), "-addrs")
	out, code := done()
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	for r, host := range []string{c.hosts[0], c.hosts[0], c.hosts[1]} {
		if want := fmt.Sprintf("rank %d addrs %s\n", r, host); !strings.Contains(out, want) {
			t.Errorf("no %q in the output: rank %d did not run on host %s:\n%s", want, r, host, out)
		}
		if want := fmt.Sprintf("rank %d of 3: ok", r); !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	c.checkEmpty(t)
}

// ppid is pid's parent, or -1.
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces; the fields
	// after it are "state ppid ...".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return -1
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// TestHostDies runs a long collcheck job on 2 hosts x 2 ranks and, once
// every rank is running, takes the second host away: either every process
// on it is SIGKILLed (the machine died), or only the rsh sessions grun
// holds to it are (the connections dropped, the ranks still running). grun
// must then exit promptly with 137, name a rank of that host and the host,
// and leave no process behind on either host; the first host's ranks must
// not report success (they lost peers) and must not hang.
func TestHostDies(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	dead := c.hosts[1]
	tests := []struct {
		name string
		kill func(t *testing.T, grunPid int) // what to SIGKILL
		msg  string                          // how grun must report it
	}{
		{
			name: "every process",
			kill: func(t *testing.T, grunPid int) {
				killNamespace(c.ns[dead])
			},
			msg: `grun: rank [23] on host ` + regexp.QuoteMeta(dead) + ` \(rsh pid \d+\) (lost: its rsh to ` +
				regexp.QuoteMeta(dead) + ` was killed by signal SIGKILL|killed by signal SIGKILL)`,
		},
		{
			name: "rsh sessions",
			kill: func(t *testing.T, grunPid int) {
				n := 0
				for _, p := range pids(c.ns[dead]) {
					if ppid(p) == grunPid {
						syscall.Kill(p, syscall.SIGKILL)
						n++
					}
				}
				if n != 2 {
					t.Errorf("killed %d rsh sessions of grun (pid %d) in %s, want 2", n, grunPid, c.ns[dead])
				}
			},
			msg: `grun: rank [23] on host ` + regexp.QuoteMeta(dead) + ` \(rsh pid \d+\) lost: its rsh to ` +
				regexp.QuoteMeta(dead) + ` was killed by signal SIGKILL`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, done := c.grunIn(t, 2*time.Minute, nil, "-H", c.hosts[0]+":2,"+dead+":2", "--rsh", c.rsh(t),
				"-x", "GOCOLL_TIMEOUT=60s", filepath.Join(bin, "collcheck"), "-rounds", "100000")
			// Wait until both ranks run on the doomed host, and a little
			// longer so that the job is inside its collectives.
			deadline := time.Now().Add(60 * time.Second)
			for {
				n := 0
				for _, p := range pids(c.ns[dead]) {
					if comm(p) == "collcheck" {
						n++
					}
				}
				if n == 2 {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					out, _ := done()
					t.Fatalf("the ranks of host %s never started:\n%s", dead, out)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second)
			killed := time.Now()
			tc.kill(t, cmd.Process.Pid)
			out, code := done()
			took := time.Since(killed)
			t.Logf("grun exited %d, %v after the kill", code, took.Round(time.Millisecond))
			if code != 137 {
				t.Errorf("exit code %d, want 137 (SIGKILL):\n%s", code, out)
			}
			if !regexp.MustCompile(tc.msg).MatchString(out) {
				t.Errorf("grun's message does not match %s:\n%s", tc.msg, out)
			}
			if strings.Contains(out, ": ok,") {
				t.Errorf("a rank reported success although its peers' host died:\n%s", out)
			}
			// --fail-wait (2s) plus --grace (3s) bound a stop; the rest
			// is slack for a loaded machine.
			if took > 20*time.Second {
				t.Errorf("grun took %v to end the job after host %s died", took, dead)
			}
			c.checkEmpty(t)
		})
	}
}

// TestMultiHostJobControl checks, on 2 namespace hosts x 2 ranks, what grun
// promises remote ranks besides a place to run: -x variables (and nothing
// else of grun's environment) reach them, --tag-output and --output-dir
// sort their lines, grun exits with the first failing rank's status naming
// it and its host, and SIGINT to grun reaches every remote rank, as SIGTERM
// (or, when they ignore that, SIGKILL does after --grace). No process may be left on
// either host.
func TestMultiHostJobControl(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	hosts := []string{"-H", c.hosts[0] + ":2," + c.hosts[1] + ":2", "--rsh", c.rsh(t)}
	noneLeft := func(t *testing.T) {
		t.Helper()
		c.checkEmpty(t)
	}
	const show = `echo "$FOO|${GRUN_TEST_SECRET-unset}|$GRUN_RANK|$GRUN_LOCAL_RANK|$GRUN_LOCAL_SIZE|$GRUN_SIZE"`

	t.Run("env and tags", func(t *testing.T) {
		_, done := c.grunIn(t, time.Minute, []string{"GRUN_TEST_SECRET=grun's own"},
			append(hosts, "--tag-output", "-x", "FOO=a 'b' $c", "sh", "-c", show)...)
		out, code := done()
		if code != 0 {
			t.Fatalf("exit code %d:\n%s", code, out)
		}
		for r := 0; r < 4; r++ {
			if want := fmt.Sprintf("[%d] a 'b' $c|unset|%d|%d|2|4\n", r, r, r%2); !strings.Contains(out, want) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
		noneLeft(t)
	})

	t.Run("output-dir", func(t *testing.T) {
		dir := t.TempDir()
		_, done := c.grunIn(t, time.Minute, nil, append(hosts, "--output-dir", dir, "-x", "FOO=f", "sh", "-c", show+"; echo err >&2")...)
		out, code := done()
		if code != 0 {
			t.Fatalf("exit code %d:\n%s", code, out)
		}
		if strings.Contains(out, "|") {
			t.Errorf("rank output reached grun's own output despite --output-dir:\n%s", out)
		}
		for r := 0; r < 4; r++ {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.log", r)))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			slices.Sort(got)
			want := []string{fmt.Sprintf("f|unset|%d|%d|2|4", r, r%2), "err"}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("rank-%d.log holds %q, want the lines %q", r, b, want)
			}
		}
		noneLeft(t)
	})

	t.Run("exit status", func(t *testing.T) {
		start := time.Now()
		_, done := c.grunIn(t, time.Minute, nil, append(hosts, "sh", "-c", `[ "$GRUN_RANK" = 3 ] && exit 7; exec sleep 60`)...)
		out, code := done()
		if code != 7 {
			t.Errorf("exit code %d, want 7 (rank 3's):\n%s", code, out)
		}
		want := regexp.MustCompile(`grun: rank 3 on host ` + regexp.QuoteMeta(c.hosts[1]) + ` \(rsh pid \d+\) exited with status 7; stopped the other 3 ranks`)
		if !want.MatchString(out) {
			t.Errorf("grun's message does not match %v:\n%s", want, out)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("took %v: the sleeping ranks were not stopped", d)
		}
		noneLeft(t)
	})

	for _, tc := range []struct {
		name   string
		script string
		msg    string // grun's last words
		each   string // what each rank prints on the signal, %d its rank
	}{
		// Remote ranks get SIGINT as SIGTERM (see remoteScript).
		{"SIGINT", `trap 'echo got TERM $GRUN_RANK; exit 5' TERM; touch "$D/ready-$GRUN_RANK"; while :; do sleep 0.05; done`,
			`grun: got SIGINT; stopped 4 ranks\n`, "got TERM %d\n"},
		{"SIGINT ignored", `trap '' INT TERM; touch "$D/ready-$GRUN_RANK"; while :; do sleep 0.05; done`,
			`grun: sent SIGKILL to 4 ranks still running after --grace 1s: [0-3], [0-3], [0-3], [0-3]\n(.*\n)*grun: got SIGINT; stopped 4 ranks\n`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd, done := c.grunIn(t, time.Minute, nil, append(hosts, "--grace", "1s", "-x", "D="+dir, "sh", "-c", tc.script)...)
			deadline := time.Now().Add(30 * time.Second)
			for {
				m, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
				if len(m) == 4 {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					out, _ := done()
					t.Fatalf("the ranks never all started:\n%s", out)
				}
				time.Sleep(10 * time.Millisecond)
			}
			sent := time.Now()
			cmd.Process.Signal(os.Interrupt)
			out, code := done()
			if code != 130 {
				t.Errorf("exit code %d, want 130 (SIGINT):\n%s", code, out)
			}
			if !regexp.MustCompile(tc.msg).MatchString(out) {
				t.Errorf("grun's output does not match %s:\n%s", tc.msg, out)
			}
			if tc.each != "" {
				for r := 0; r < 4; r++ {
					if want := fmt.Sprintf(tc.each, r); !strings.Contains(out, want) {
						t.Errorf("rank %d did not get the signal (no %q):\n%s", r, want, out)
					}
				}
			}
			if d := time.Since(sent); d > 15*time.Second {
				t.Errorf("grun took %v to stop the job after SIGINT", d)
			}
			noneLeft(t)
		})
	}
}

// TestStallReportAcrossHosts: the same report when the late rank runs on
// another host (network namespaces, grun's rsh): it answers through the
// rendezvous like any rank.
func TestStallReportAcrossHosts(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	rsh := c.rsh(t) // from the package directory
	// grun, and the ranks through rsh, write in the working directory.
	wd, _ := os.Getwd()
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	_, done := c.grunIn(t, 2*time.Minute, nil, "-H", c.hosts[0]+":2,"+c.hosts[1]+":2", "--rsh", rsh,
		"-x", "GOCOLL_STALL=1s", filepath.Join(bin, "straggler"), "-late", "3", "-for", "3s")
	out, code := done()
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	for _, want := range []string{
		`grun: oldest unfinished call: allreduce #3 \(algo \w+, 262144 x float32, sum\)`,
		`grun:   in it: ranks 0-2, waiting up to`,
		`grun:   rank 3 finished allreduce #2 .* ago and has not entered #3`,
		`grun:     its main goroutine \[sleep\] is in main.dawdle`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("report does not say %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "gocoll stall report:"); n != 1 {
		t.Errorf("%d reports, want 1:\n%s", n, out)
	}
	c.checkEmpty(t)
}
