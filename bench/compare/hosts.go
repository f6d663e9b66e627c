package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The -hosts mode: every side runs across network-namespace hosts instead
// of on one host. A launcher namespace holds a bridge (198.18.0.1/24), where
// grun, mpirun and hydra's mpiexec run; host i is a namespace with eth0 at
// 198.18.0.(i+2), joined to the bridge by a veth pair. Each host's link is
// shaped in both directions by a tbf qdisc (its eth0 sends, its bridge port
// sends to it), so every host has a full-duplex NIC of -rate. The
// addresses exist only inside these namespaces: nothing of the machine's
// own network is touched, and clusters of different runs do not meet.

// parseRate reads a tc rate (1gbit, 500mbit, 4Gbit, 100kbit) and returns it
// in bits per second.
func parseRate(s string) (float64, error) {
	u := strings.ToLower(strings.TrimSpace(s))
	mult := 0.0
	for _, suf := range []struct {
		s string
		m float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if strings.HasSuffix(u, suf.s) {
			mult, u = suf.m, strings.TrimSuffix(u, suf.s)
			break
		}
	}
	v, err := strconv.ParseFloat(u, 64)
	if mult == 0 || err != nil || v <= 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("-rate %q: want a tc rate such as 1gbit, 4gbit or 500mbit: %w", s, errUsage)
	}
	return v * mult, nil
}

// cluster is the namespaces of one compare run.
type cluster struct {
	tag      string
	launcher string   // namespace the launchers run in
	launchIP string   // its address on the bridge
	hosts    []string // host addresses
	ns       []string // host i's namespace
	rsh      string   // script: rsh-like "SCRIPT [-opts] HOST COMMAND..." into the host's namespace
	subnet   string
}

// hostAddr is host i's address.
func hostAddr(i int) string { return fmt.Sprintf("198.18.0.%d", i+2) }

// tbfArgs are the tc arguments that shape dev to rate bits/s: a bucket of
// 1 ms at line rate (at least 64 KiB, since veth hands tbf GSO packets of up
// to 64 KiB) and at most 10 ms of queue.
func tbfArgs(dev string, rate float64, rateStr string) []string {
	burst := max(int64(rate/8/1000), 64<<10)
	return []string{"qdisc", "add", "dev", dev, "root", "tbf", "rate", rateStr,
		"burst", strconv.FormatInt(burst, 10), "latency", "10ms"}
}

// rshScript is the launch agent for every side: grun's --rsh, Open MPI's
// plm_rsh_agent and hydra's -launcher-exec all call it as an rsh, with the
// host first (after options such as ssh's -x, which are skipped) and the
// command after it, and it runs the command by sh in that host's namespace.
func rshScript(hosts, ns []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# rsh into compare's namespace hosts\n")
	b.WriteString("while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done\n")
	b.WriteString("host=$1; shift\ncase $host in\n")
	for i, h := range hosts {
		fmt.Fprintf(&b, "%s) ns=%s ;;\n", h, ns[i])
	}
	b.WriteString("*) echo \"rsh: no namespace for host $host\" >&2; exit 255 ;;\nesac\n")
	// A host of its own has a /tmp of its own: Open MPI keeps its
	// session directory there under the hostname, which every namespace
	// shares, so hosts sharing one /tmp remove each other's files.
	b.WriteString("export TMPDIR=\"${0%/*}/tmp-$ns\"; mkdir -p \"$TMPDIR\"\n")
	b.WriteString("exec ip netns exec \"$ns\" sh -c \"$*\"\n")
	return b.String()
}

// newCluster builds n hosts with links shaped to rate. On failure it
// removes whatever it built; otherwise the caller must call close.
func newCluster(ctx context.Context, n int, rate float64, rateStr, work string) (c *cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("-hosts builds hosts from network namespaces and shapes their links with tc, which needs root: run compare as root (or leave -hosts out)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("-hosts needs %s (apt-get install iproute2): %w", tool, errMissing)
		}
	}
	c = &cluster{tag: fmt.Sprintf("gocoll-cmp-%d", os.Getpid()), launchIP: "198.18.0.1", subnet: "198.18.0.0/24"}
	c.launcher = c.tag + "-l"
	defer func() {
		if err != nil {
			c.close()
			c = nil
		}
	}()
	ip := func(args ...string) error {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	tc := func(ns string, args ...string) error {
		if out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "tc"}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("tc %s in %s: %w\n%s", strings.Join(args, " "), ns, err, out)
		}
		return nil
	}
	if err := ip("netns", "add", c.launcher); err != nil {
		return c, err
	}
	for _, a := range [][]string{
		{"-n", c.launcher, "link", "set", "lo", "up"},
		{"-n", c.launcher, "link", "add", "br0", "type", "bridge"},
		{"-n", c.launcher, "addr", "add", c.launchIP + "/24", "dev", "br0"},
		{"-n", c.launcher, "link", "set", "br0", "up"},
	} {
		if err := ip(a...); err != nil {
			return c, err
		}
	}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("%s-h%d", c.tag, i)
		if err := ip("netns", "add", ns); err != nil {
			return c, err
		}
		c.ns = append(c.ns, ns)
		c.hosts = append(c.hosts, hostAddr(i))
		veth := fmt.Sprintf("veth%d", i)
		for _, a := range [][]string{
			{"-n", c.launcher, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"-n", c.launcher, "link", "set", veth, "master", "br0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", ns, "addr", "add", hostAddr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
		} {
			if err := ip(a...); err != nil {
				return c, err
			}
		}
		if err := tc(ns, tbfArgs("eth0", rate, rateStr)...); err != nil {
			return c, err
		}
		if err := tc(c.launcher, tbfArgs(veth, rate, rateStr)...); err != nil {
			return c, err
		}
	}
	c.rsh = work + "/netns-rsh"
	if err := os.WriteFile(c.rsh, []byte(rshScript(c.hosts, c.ns)), 0o755); err != nil {
		return c, err
	}
	return c, nil
}

// close kills every process left in the namespaces (deleting a namespace
// only removes its name) and deletes them.
func (c *cluster) close() {
	for _, ns := range append([]string{c.launcher}, c.ns...) {
		killNamespace(ns)
		exec.Command("ip", "netns", "del", ns).Run()
	}
}

func killNamespace(ns string) {
	for range 50 {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		ps := strings.Fields(string(out))
		if len(ps) == 0 {
			return
		}
		for _, f := range ps {
			if p, err := strconv.Atoi(f); err == nil && p != os.Getpid() {
				// os.Process, not syscall.Kill: the command builds
				// everywhere (TestCrossBuild), though -hosts needs Linux.
				if proc, err := os.FindProcess(p); err == nil {
					proc.Kill()
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostList is grun's and hydra's -H/-hosts value: host i with layout[i]
// slots. All three launchers fill the hosts in order, so rank r runs on
// host hostOf(layout, r) on every side.
func (c *cluster) hostList(layout []int) string {
	var l []string
	for i, h := range c.hosts {
		l = append(l, h+":"+strconv.Itoa(layout[i]))
	}
	return strings.Join(l, ",")
}

// hostfile writes Open MPI's hostfile: host i with layout[i] slots.
func (c *cluster) hostfile(path string, layout []int) error {
	var b strings.Builder
	for i, h := range c.hosts {
		fmt.Fprintf(&b, "%s slots=%d\n", h, layout[i])
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// parseLayout reads -ranks-per-host: one count, or one per host.
func parseLayout(s string) ([]int, error) {
	var l []int
	for _, f := range strings.Split(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("-ranks-per-host %q: want a count of at least 1, or one per host, comma-separated: %w", s, errUsage)
		}
		l = append(l, k)
	}
	return l, nil
}

// hostOf is the host of rank r when the hosts are filled in order.
func hostOf(layout []int, r int) int {
	for i, k := range layout {
		if r < k {
			return i
		}
		r -= k
	}
	return len(layout) - 1
}

// layoutString says how many ranks each host holds: "2" when every host
// holds 2, else "4,1".
func layoutString(layout []int) string {
	var l []string
	even := true
	for _, k := range layout {
		l = append(l, strconv.Itoa(k))
		even = even && k == layout[0]
	}
	if even && len(l) > 0 {
		return l[0]
	}
	return strings.Join(l, ",")
}

// inLauncher prefixes a command with ip netns exec into the launcher.
func (c *cluster) inLauncher(name string, args ...string) (string, []string) {
	return "ip", append([]string{"netns", "exec", c.launcher, name}, args...)
}
