package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bench/internal/report"
	"github.com/gocoll/gocoll/internal/testmode"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"1gbit": 1e9, "4Gbit": 4e9, "500mbit": 5e8, "2.5gbit": 2.5e9, "100kbit": 1e5, "64bit": 64} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1g", "gbit", "-1gbit", "0mbit", "1gbps", "x1gbit"} {
		if _, err := parseRate(in); !errors.Is(err, errUsage) {
			t.Errorf("parseRate(%q): %v, want a usage error", in, err)
		}
	}
}

func TestParseOptionsHosts(t *testing.T) {
	o, err := parseOptions([]string{"-hosts", "4", "-ranks-per-host", "2", "-rate", "4gbit"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.n != 8 || o.hosts != 4 || fmt.Sprint(o.layout) != "[2 2 2 2]" || o.rateBps != 4e9 || o.path != "tcp" {
		t.Errorf("%+v", o)
	}
	// Uneven hosts: one count per host, -hosts implied or matching.
	for _, args := range [][]string{{"-ranks-per-host", "4,1"}, {"-hosts", "2", "-ranks-per-host", "4, 1"}, {"-ranks-per-host", "4,1", "-n", "5"}} {
		o, err := parseOptions(args, io.Discard)
		if err != nil || o.n != 5 || o.hosts != 2 || fmt.Sprint(o.layout) != "[4 1]" {
			t.Errorf("%v: %+v, %v; want 5 ranks on 2 hosts, [4 1]", args, o, err)
		}
	}
	if o, err := parseOptions([]string{"-hosts", "2", "-n", "2"}, io.Discard); err != nil || o.n != 2 || o.rateBps != 1e9 {
		t.Errorf("-hosts 2 -n 2: %+v, %v", o, err)
	}
	for _, args := range [][]string{
		{"-hosts", "1"}, {"-hosts", "-2"}, {"-hosts", "2", "-ranks-per-host", "0"}, {"-hosts", "2", "-n", "3"},
		{"-ranks-per-host", "4,0"}, {"-ranks-per-host", "4,x"}, {"-hosts", "3", "-ranks-per-host", "4,1"}, {"-ranks-per-host", "4,1", "-n", "4"},
		{"-ranks-per-host", "4"},
		{"-hosts", "2", "-transport", "shm"}, {"-hosts", "2", "-mpi", "shm"}, {"-hosts", "2", "-rate", "fast"},
		{"-hosts", "2", "-ours", "{grun} {collbench}"}, {"-hosts", "251"},
	} {
		if _, err := parseOptions(args, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func TestHostOf(t *testing.T) {
	layout := []int{4, 1, 2}
	var got []int
	for r := range 7 {
		got = append(got, hostOf(layout, r))
	}
	if fmt.Sprint(got) != "[0 0 0 0 1 2 2]" {
		t.Errorf("hostOf(%v, 0..6) = %v", layout, got)
	}
	c := &cluster{hosts: []string{"198.18.0.2", "198.18.0.3", "198.18.0.4"}}
	if got := c.hostList(layout); got != "198.18.0.2:4,198.18.0.3:1,198.18.0.4:2" {
		t.Errorf("hostList = %q", got)
	}
	if got, want := layoutString(layout)+" "+layoutString([]int{2, 2}), "4,1,2 2"; got != want {
		t.Errorf("layoutString: %q, want %q", got, want)
	}
}

func TestTbfArgs(t *testing.T) {
	// 1 ms at 4 Gbit/s is 500000 bytes; at 100 Mbit/s the 64 KiB floor.
	if got := strings.Join(tbfArgs("eth0", 4e9, "4gbit"), " "); got != "qdisc add dev eth0 root tbf rate 4gbit burst 500000 latency 10ms" {
		t.Error(got)
	}
	if got := strings.Join(tbfArgs("veth1", 1e8, "100mbit"), " "); !strings.Contains(got, "burst 65536 ") {
		t.Error(got)
	}
}

// The rsh script finds the host's namespace after any options, and fails
// as ssh does (255) for a host it does not know.
func TestRshScript(t *testing.T) {
	s := rshScript([]string{"198.18.0.2", "198.18.0.3"}, []string{"nsA", "nsB"})
	for _, want := range []string{"198.18.0.2) ns=nsA ;;", "198.18.0.3) ns=nsB ;;", `exec ip netns exec "$ns" sh -c "$*"`} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in\n%s", want, s)
		}
	}
	path := filepath.Join(t.TempDir(), "rsh")
	if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", path, "-x", "198.18.9.9", "true").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 255 || !strings.Contains(string(out), "no namespace for host 198.18.9.9") {
		t.Errorf("unknown host: %v\n%s", err, out)
	}
}

func TestPrintTablesLineRate(t *testing.T) {
	o := options{n: 2, transport: "tcp", path: "tcp", repeat: 3, alternate: true, hosts: 2, layout: []int{1, 1}, rate: "1gbit", rateBps: 1e9}
	// 1 MiB on 2 ranks: busbw = algbw; 10486 µs is 0.1000 GB/s, 80% of 0.125.
	row := func(med, lo, hi float64) report.Row {
		r := withBW(report.Row{Size: 1 << 20, TimeUS: med}, 2)
		r.TimeMinUS, r.TimeMaxUS = lo, hi
		return r
	}
	sides := []side{{name: "gocoll"}, {name: "ompi"}}
	res := []report.Result{{Rows: []report.Row{row(10485.76, 8388.608, 20971.52)}}, {Rows: []report.Row{row(20971.52, 20971.52, 20971.52)}}}
	var b bytes.Buffer
	printTables(&b, o, sides, res, 0)
	out := b.String()
	for _, want := range []string{
		"across 2 network-namespace hosts × 1 rank(s), each host's link shaped by tbf to 1gbit each way: line rate 0.1250 GB/s",
		"fraction of the line rate (0.1250 GB/s)",
		"0.1000 [0.0500-0.1250]  80.0%", "0.0500 [0.0500-0.0500]  40.0%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestCompareHosts runs the comparison across two namespace hosts for
// real, briefly: every side installed here (CI installs them all) but
// MPICH (see below), two sizes, one round; then no namespace of the run
// may be left.
func TestCompareHosts(t *testing.T) {
	testmode.SkipIfQuick(t)
	if os.Geteuid() != 0 {
		t.Skip("-hosts builds network namespaces, which needs root (CI runs as root)")
	}
	// MPICH is left out here: across namespace hosts its ranks
	// sometimes never finish starting (1 run in 5 on this machine, one
	// rank spinning, the other asleep, until -timeout), and CI must not
	// depend on that. `compare -hosts` still runs it; bench/README.md
	// says so.
	t.Log("comparing without mpich: it hangs now and then across namespace hosts")
	peers := installedPeers(t, "ompi", "gloo")
	// Remote ranks get the caller's GOCOLL_* through grun -x.
	t.Setenv("GOCOLL_TIMEOUT", "150s")
	dir := t.TempDir()
	args := []string{"-hosts", "2", "-rate", "1gbit", "-min", "8", "-max", "16", "-iters", "5", "-repeat", "1",
		"-membw=false", "-peers", strings.Join(peers, ","), "-save", dir, "-timeout", "3m"}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out, stderr bytes.Buffer
	if err := run(ctx, args, &out, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	t.Logf("\n%s", out.String())
	for _, name := range append([]string{"gocoll"}, peers...) {
		r, err := report.ReadFile(filepath.Join(dir, name+"-1.json"))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, stderr.String())
		}
		if len(r.Rows) != 2 {
			t.Errorf("%s: %d rows, want 8 and 16 bytes", name, len(r.Rows))
		}
		for _, row := range r.Rows {
			if row.TimeUS <= 0 || row.Wrong != 0 {
				t.Errorf("%s: row %+v", name, row)
			}
		}
	}
	if !strings.Contains(out.String(), " -x GOCOLL_TIMEOUT=150s ") {
		t.Errorf("the header does not show GOCOLL_TIMEOUT passed to the ranks:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "line rate 0.1250 GB/s") {
		t.Errorf("no line rate in\n%s", out.String())
	}
	list, _ := exec.Command("ip", "netns", "list").Output()
	if tag := fmt.Sprintf("gocoll-cmp-%d-", os.Getpid()); strings.Contains(string(list), tag) {
		t.Errorf("namespaces %s* left behind:\n%s", tag, list)
	}
}
