//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEnvironment(t *testing.T) {
	t.Parallel()
	cmd, stdout, stderr := grunCmd(t, "-v", "-n", "4", "-x", "FOO=bar", "-x", "HOME", "-x", "EMPTY=",
		helper("envdump"), "FOO", "HOME", "EMPTY")
	// FOO in grun's environment must lose to -x; a GRUN_RANK inherited
	// from an enclosing job must lose to the rank's own.
	cmd.Env = append(cmd.Env, "HOME=/grun/test/home", "FOO=inherited", "GRUN_RANK=99", "GRUN_TOKEN=outer")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := wait(t, cmd, stdout, stderr, start)
	if res.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
	}

	// vars[rank][name] = value
	vars := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
		rank, kv, ok := strings.Cut(line, " ")
		name, val, isSet := strings.Cut(kv, "=")
		if !ok || !isSet {
			t.Fatalf("unexpected line %q", line)
		}
		if vars[rank] == nil {
			vars[rank] = map[string]string{}
		}
		vars[rank][name] = val
	}
	if len(vars) != 4 {
		t.Fatalf("got output of ranks %v, want 0..3:\n%s", keys(vars), res.stdout)
	}
	addr, token := vars["0"]["GRUN_ADDR"], vars["0"]["GRUN_TOKEN"]
	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(addr) {
		t.Errorf("GRUN_ADDR %q, want 127.0.0.1:port", addr)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Errorf("GRUN_TOKEN %q, want 64 hex digits", token)
	}
	for r := 0; r < 4; r++ {
		rs := strconv.Itoa(r)
		want := map[string]string{
			"GRUN_RANK": rs, "GRUN_SIZE": "4", "GRUN_LOCAL_RANK": rs, "GRUN_LOCAL_SIZE": "4",
			"GRUN_ADDR": addr, "GRUN_TOKEN": token,
			"FOO": "bar", "HOME": "/grun/test/home", "EMPTY": "",
		}
		for name, w := range want {
			if got, ok := vars[rs][name]; !ok || got != w {
				t.Errorf("rank %d: %s=%q (set: %v), want %q", r, name, got, ok, w)
			}
		}
	}

	// -v: the store, N and every pid, but never the token.
	for _, want := range []string{"rendezvous store at " + addr, "starting 4 ranks"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("-v output lacks %q:\n%s", want, res.stderr)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^grun: rank \d: pid \d+$`).FindAllString(res.stderr, -1)); n != 4 {
		t.Errorf("-v printed %d pids, want 4:\n%s", n, res.stderr)
	}
	if strings.Contains(res.stderr, token) {
		t.Errorf("-v printed the token:\n%s", res.stderr)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// payload must match testdata/lines.
func payload(k int) string {
	return strings.Repeat(string(rune('a'+k%26)), k%97)
}

func TestOutputLines(t *testing.T) {
	t.Parallel()
	const ranks, lines, long = 4, 10000, 300 << 10
	for _, tag := range []bool{true, false} {
		t.Run(fmt.Sprintf("tag=%v", tag), func(t *testing.T) {
			t.Parallel()
			args := []string{"-n", strconv.Itoa(ranks)}
			if tag {
				args = append(args, "--tag-output")
			}
			args = append(args, helper("lines"), "-n", strconv.Itoa(lines), "-long", strconv.Itoa(long), "-errs", "50")
			res := runGrun(t, args...)
			if res.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%.2000s", res.code, res.stderr)
			}
			// Each rank's lines in order and intact: the next line number
			// expected from each rank, then its long line, then its tail.
			next := make([]int, ranks)
			sawLong := make([]bool, ranks)
			sawTail := make([]bool, ranks)
			lineRE := regexp.MustCompile(`^rank=(\d) line=(\d+) payload=([a-z]*)$`)
			eachLine(t, res.stdout, tag, func(r int, line string) {
				switch {
				case sawTail[r]:
					t.Fatalf("rank %d: line after the tail: %.100q", r, line)
				case line == fmt.Sprintf("rank=%d tail", r):
					sawTail[r] = true
				case strings.HasPrefix(line, fmt.Sprintf("rank=%d long=", r)):
					if x := strings.TrimPrefix(line, fmt.Sprintf("rank=%d long=", r)); x != strings.Repeat("x", long) {
						t.Fatalf("rank %d: long line of %d bytes, not %d x's", r, len(x), long)
					}
					sawLong[r] = true
				default:
					m := lineRE.FindStringSubmatch(line)
					if m == nil || m[1] != strconv.Itoa(r) {
						t.Fatalf("rank %d: mangled line %.200q", r, line)
					}
					if k, _ := strconv.Atoi(m[2]); k != next[r] || m[3] != payload(k) || sawLong[r] {
						t.Fatalf("rank %d: got %.200q, want line %d", r, line, next[r])
					}
					next[r]++
				}
			})
			for r := 0; r < ranks; r++ {
				if next[r] != lines || !sawLong[r] || !sawTail[r] {
					t.Errorf("rank %d: %d lines, long line %v, tail %v", r, next[r], sawLong[r], sawTail[r])
				}
			}

			// Stderr went to stderr, just as whole.
			errs := make([]int, ranks)
			eachLine(t, res.stderr, tag, func(r int, line string) {
				if line != fmt.Sprintf("rank=%d err=%d", r, errs[r]) {
					t.Fatalf("stderr of rank %d: got %q, want err=%d", r, line, errs[r])
				}
				errs[r]++
			})
			for r, n := range errs {
				if n != 50 {
					t.Errorf("rank %d: %d stderr lines, want 50", r, n)
				}
			}
		})
	}
}

// eachLine calls f with every line of out and the rank that printed it:
// from the tag when tagged, else from the "rank=R" every helper line starts
// with.
func eachLine(t *testing.T, out string, tagged bool, f func(rank int, line string)) {
	t.Helper()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end in a newline: ...%q", out[max(0, len(out)-100):])
	}
	tagRE := regexp.MustCompile(`^\[(\d)\] `)
	rankRE := regexp.MustCompile(`^rank=(\d) `)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		line := sc.Text()
		var m []string
		if tagged {
			m = tagRE.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("untagged line %.200q", line)
			}
			line = line[len(m[0]):]
		} else if m = rankRE.FindStringSubmatch(line); m == nil {
			t.Fatalf("mangled line %.200q", line)
		}
		r, _ := strconv.Atoi(m[1])
		f(r, line)
	}
}

// stopSlack bounds how much longer than its least time a stopped job may
// take: starting the ranks on a loaded machine, the default --fail-wait
// (2s) and stopping them. It is well below what a grun that waits out a
// rank's sleep (60s) or a case's long --fail-wait (45s) would take.
const stopSlack = 20 * time.Second

// TestStop covers the ways a job ends early: each case must end with the
// right status and message, and leave no process of the job behind.
func TestStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		n      int
		flags  []string // grun's
		ctl    []string // rankctl's, besides -dir and -ready
		code   int
		msg    string // regexp; PID stands for the failing rank's pid
		failer int    // the rank whose pid PID is, if any
		minDur time.Duration
	}{
		{
			name: "exit status", n: 4, ctl: []string{"-fail-rank", "2", "-code", "3"},
			code: 3, msg: `(?m)^grun: rank 2 \(pid PID\) exited with status 3; stopped the other 3 ranks\n\z`, failer: 2,
		},
		{
			name: "killed by signal", n: 2, ctl: []string{"-kill-rank", "1"},
			code: 137, msg: `(?m)^grun: rank 1 \(pid PID\) killed by signal SIGKILL; stopped the other 1 rank\n\z`, failer: 1,
		},
		{
			name: "grandchildren", n: 3, ctl: []string{"-child", "-fail-rank", "0", "-code", "5"},
			code: 5, msg: `(?m)^grun: rank 0 \(pid PID\) exited with status 5; stopped the other 2 ranks\n\z`, failer: 0,
		},
		{
			name: "ignores SIGTERM", n: 3, flags: []string{"--grace", "500ms"}, ctl: []string{"-ignore-term", "-fail-rank", "0"},
			code: 1, msg: `(?m)^grun: sent SIGKILL to 2 ranks still running after --grace 500ms: 1, 2\n` +
				`grun: rank 0 \(pid PID\) exited with status 1; stopped the other 2 ranks\n\z`,
			failer: 0, minDur: 500 * time.Millisecond,
		},
		{
			// The others notice and exit on their own within --fail-wait:
			// grun waits for them and sends no signal, and does not sit
			// out the whole --fail-wait (longer than the test's bound on
			// the time, stopSlack).
			name: "others exit on their own", n: 3, flags: []string{"--fail-wait", "45s"}, ctl: []string{"-fail-rank", "0", "-code", "3", "-follow"},
			code: 3, msg: `(?m)^grun: rank 0 \(pid PID\) exited with status 3; at about the same time rank [12] exited with status 4, rank [12] exited with status 4\n\z`,
			failer: 0,
		},
		{
			name: "fail-wait expires", n: 2, flags: []string{"--fail-wait", "700ms"}, ctl: []string{"-fail-rank", "1", "-code", "2"},
			code: 2, msg: `(?m)^grun: rank 1 \(pid PID\) exited with status 2; stopped the other 1 rank\n\z`,
			failer: 1, minDur: 700 * time.Millisecond,
		},
		{
			// An elastic job goes on without a dead rank while enough
			// live, and succeeds if the rest end well.
			name: "elastic goes on", n: 3, flags: []string{"--elastic", "2"}, ctl: []string{"-kill-rank", "1", "-sleep", "1s"},
			code: 0, msg: `(?m)^grun: rank 1 \(pid PID\) killed by signal SIGKILL; the job goes on with 2 ranks \(--elastic 2\)\n` +
				`grun: the job finished with 2 of 3 ranks; lost rank 1 \(--elastic 2\)\n\z`,
			failer: 1, minDur: time.Second,
		},
		{
			// Up to a MAX, grun starts a replacement of the dead rank,
			// with its environment, and the job ends with as many.
			name: "elastic replaces", n: 3, flags: []string{"--elastic", "2:3"}, ctl: []string{"-kill-rank", "1", "-sleep", "1s"},
			code: 0, msg: `(?m)^grun: rank 1 \(pid PID\) killed by signal SIGKILL; the job goes on with 2 ranks \(--elastic 2:3\)\n` +
				`grun: started a replacement of rank 1 \(pid \d+\), which joins the running job \(--elastic 2:3\)\n` +
				`grun: the job finished with 3 ranks, 1 of them replacements; lost rank 1 \(--elastic 2:3\)\n\z`,
			failer: 1, minDur: time.Second,
		},
		{
			name: "elastic below its minimum", n: 2, flags: []string{"--elastic", "2"}, ctl: []string{"-kill-rank", "1"},
			code: 137, msg: `(?m)^grun: 1 rank left after rank 1 failed, fewer than --elastic 2: stopping the job\n` +
				`grun: rank 1 \(pid PID\) killed by signal SIGKILL; stopped the other 1 rank\n\z`,
			failer: 1,
		},
		{
			name: "timeout", n: 3, flags: []string{"--timeout", "1s"}, ctl: []string{"-child"},
			code: 124, msg: `(?m)^grun: job exceeded --timeout 1s; stopped 3 ranks\n\z`, failer: -1, minDur: time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append([]string{"-n", strconv.Itoa(tc.n)}, tc.flags...)
			args = append(args, helper("rankctl"), "-dir", dir, "-ready", strconv.Itoa(tc.n))
			args = append(args, tc.ctl...)
			res := runGrun(t, args...)
			ranks := pidFiles(t, dir, "rank-*.pid")
			children := pidFiles(t, dir, "child-*.pid")
			for name, pid := range pidFiles(t, dir, "replacement-*.pid") {
				children[name] = pid // checked gone below
			}

			if res.code != tc.code {
				t.Errorf("exit status %d, want %d", res.code, tc.code)
			}
			msg := tc.msg
			if tc.failer >= 0 {
				msg = strings.Replace(msg, "PID", strconv.Itoa(ranks[fmt.Sprintf("rank-%d.pid", tc.failer)]), 1)
			}
			if !regexp.MustCompile(msg).MatchString(res.stderr) {
				t.Errorf("stderr does not match %s:\n%s", msg, res.stderr)
			}
			if len(ranks) != tc.n {
				t.Errorf("%d ranks got ready, want %d", len(ranks), tc.n)
			}
			if strings.Contains(strings.Join(tc.ctl, " "), "-child") && len(children) != tc.n {
				t.Errorf("%d children started, want %d", len(children), tc.n)
			}
			for name, pid := range ranks {
				if !gone(pid) {
					t.Errorf("%s: pid %d still running after grun exited", name, pid)
				}
			}
			for name, pid := range children {
				if !gone(pid) {
					t.Errorf("%s: pid %d (a rank's child) still running after grun exited", name, pid)
				}
			}
			if res.elapsed < tc.minDur {
				t.Errorf("grun took %v, less than %v", res.elapsed, tc.minDur)
			}
			if limit := tc.minDur + stopSlack; res.elapsed > limit {
				t.Errorf("grun took %v, more than %v", res.elapsed, limit)
			}
		})
	}
}

func TestSignals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGINT, 130},
		{syscall.SIGTERM, 143},
		{syscall.SIGHUP, 129},
	}
	for _, tc := range tests {
		t.Run(signalName(tc.sig), func(t *testing.T) {
			t.Parallel()
			const n = 3
			dir := t.TempDir()
			cmd, stdout, stderr := grunCmd(t, "-n", strconv.Itoa(n), helper("rankctl"), "-dir", dir, "-record", "-child")
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFiles(t, dir, "rank-*.pid", n)
			ranks := pidFiles(t, dir, "rank-*.pid")
			children := pidFiles(t, dir, "child-*.pid")
			for name, pid := range pidFiles(t, dir, "replacement-*.pid") {
				children[name] = pid // checked gone below
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			res := wait(t, cmd, stdout, stderr, start)
			if res.code != tc.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", res.code, tc.code, res.stderr)
			}
			want := fmt.Sprintf("grun: got %s; stopped %d ranks\n", signalName(tc.sig), n)
			if !strings.HasSuffix(res.stderr, want) {
				t.Errorf("stderr does not end in %q:\n%s", want, res.stderr)
			}
			for r := 0; r < n; r++ {
				got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("sig-%d", r)))
				if err != nil || string(got) != tc.sig.String() {
					t.Errorf("rank %d recorded %q (%v), want %q", r, got, err, tc.sig.String())
				}
			}
			for name, pid := range ranks {
				if !gone(pid) {
					t.Errorf("%s: pid %d still running", name, pid)
				}
			}
			for name, pid := range children {
				if !gone(pid) {
					t.Errorf("%s: pid %d still running", name, pid)
				}
			}
		})
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	res := runGrun(t, "-n", "3", "--tag-output", helper("storeping"), "-intruder")
	if res.code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for r := 0; r < 3; r++ {
		for p := 0; p < 3; p++ {
			if p == r {
				continue
			}
			want := fmt.Sprintf("[%d] rank %d sees %d=hello-from-%d\n", r, r, p, p)
			if !strings.Contains(res.stdout, want) {
				t.Errorf("missing %q in:\n%s", want, res.stdout)
			}
		}
	}
	if !strings.Contains(res.stdout, "[0] intruder refused\n") {
		t.Errorf("the intruder was not refused:\n%s", res.stdout)
	}
	if !strings.Contains(res.stderr, "grun: the rendezvous store refused 1 connection") {
		t.Errorf("grun did not report the refused connection:\n%s", res.stderr)
	}
}

// TestRunInProcess drives run itself, so that the race detector watches
// the job's goroutines from inside the test binary too.
func TestRunInProcess(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	// One writer for both streams: output must serialise them.
	code := run(context.Background(), []string{"-n", "3", "--tag-output", helper("lines"), "-n", "200", "-errs", "200"}, &stdout, &stdout)
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, stdout.String())
	}
	counts := map[string]int{}
	eachLine(t, stdout.String(), true, func(r int, line string) {
		if strings.Contains(line, " err=") {
			counts["err"]++
		} else {
			counts["out"]++
		}
	})
	// 200 lines and the tail per rank on stdout, 200 on stderr.
	if counts["out"] != 3*201 || counts["err"] != 3*200 {
		t.Errorf("got %v lines", counts)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancelled either way: a job that never gets ready must end too.
		filesAppear(dir, "rank-*.pid", 2)
		cancel()
	}()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-n", "2", helper("rankctl"), "-dir", dir, "-child"}, &stdout, &stderr)
	if code != 143 {
		t.Errorf("exit status %d, want 143; stderr:\n%s", code, stderr.String())
	}
	if want := "grun: context canceled; stopped 2 ranks\n"; !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("stderr does not end in %q:\n%s", want, stderr.String())
	}
	for name, pid := range pidFiles(t, dir, "*.pid") {
		if !gone(pid) {
			t.Errorf("%s: pid %d still running", name, pid)
		}
	}
}

// "grun ... | head": when grun's stdout goes away the job is stopped, as a
// pipeline's writer would be by SIGPIPE.
func TestBrokenStdout(t *testing.T) {
	t.Parallel()
	cmd, _, stderr := grunCmd(t, "-n", "2", helper("lines"), "-n", "1000000000")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "rank=") {
		t.Fatalf("first line %q, %v", line, err)
	}
	pr.Close()
	res := wait(t, cmd, &bytes.Buffer{}, stderr, start)
	if res.code != 141 {
		t.Errorf("exit status %d, want 141; stderr:\n%s", res.code, res.stderr)
	}
	if want := "grun: got SIGPIPE; stopped 2 ranks\n"; !strings.HasSuffix(res.stderr, want) {
		t.Errorf("stderr does not end in %q:\n%s", want, res.stderr)
	}
}

// failingStarter fails to start one rank, as running out of processes or
// descriptors would.
type failingStarter struct {
	starter
	failAt int
	pids   []int
}

func (f *failingStarter) start(spec rankSpec) (process, error) {
	if spec.rank == f.failAt {
		return nil, errors.New("out of luck")
	}
	p, err := f.starter.start(spec)
	if err == nil {
		f.pids = append(f.pids, p.pid())
	}
	return p, err
}

func TestStartFailureStopsStartedRanks(t *testing.T) {
	t.Parallel()
	cfg, err := parseArgs([]string{"-n", "4", helper("rankctl"), "-dir", t.TempDir()}, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	st := &failingStarter{starter: newLocalStarter(), failAt: 2}
	var stdout, stderr bytes.Buffer
	code := newJob(cfg, st, &stdout, &stderr, os.Environ()).run(context.Background(), nil)
	if code != 127 {
		t.Errorf("exit status %d, want 127", code)
	}
	if want := "grun: cannot start rank 2: out of luck; stopped the 2 ranks already started\n"; !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("stderr does not end in %q:\n%s", want, stderr.String())
	}
	if len(st.pids) != 2 {
		t.Fatalf("started %d ranks, want 2", len(st.pids))
	}
	for _, pid := range st.pids {
		if !gone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("pid %d still running", pid)
		}
	}
}
