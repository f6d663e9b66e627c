// Package e2e runs gocoll the way users do: real processes started by the
// grun launcher, talking over real sockets. The in-process conformance
// suite (internal/conformance) covers the algorithms exhaustively; these
// tests cover what only separate processes exercise: the launcher's
// environment, the rendezvous, the example programs, and a rank dying.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
	"github.com/gocoll/gocoll/internal/testprog"
)

var bin string

func TestMain(m *testing.M) {
	if pre := os.Getenv("GOCOLL_E2E_BIN"); pre != "" {
		// Programs built beforehand, where no Go toolchain is (the RDMA
		// VM, see transport/rdma/vmtest/ci).
		bin = pre
		os.Exit(m.Run())
	}
	// grun, the examples, the test programs, and collbench and the
	// timeline drawer, which live in the bench module (../../bench) to
	// keep the plotting library out of gocoll's own module.
	testprog.Main(m, &bin, "e2e",
		testprog.Build{Pkgs: []string{
			"github.com/gocoll/gocoll/cmd/grun",
			"github.com/gocoll/gocoll/examples/allreduce",
			"github.com/gocoll/gocoll/examples/elastic",
			"github.com/gocoll/gocoll/examples/train",
			"github.com/gocoll/gocoll/internal/e2e/testdata/collcheck",
			"github.com/gocoll/gocoll/internal/e2e/testdata/chaos",
			"github.com/gocoll/gocoll/internal/e2e/testdata/jobshape",
			"github.com/gocoll/gocoll/internal/e2e/testdata/straggler",
			"github.com/gocoll/gocoll/internal/e2e/testdata/stranger",
		}},
		testprog.Build{Dir: "../../bench", Out: "collbench", Pkgs: []string{"."}},
		testprog.Build{Dir: "../../bench", Pkgs: []string{"./timeline"}})
}

// grun runs grun with args under a deadline and returns its combined
// output and exit code.
func grun(t *testing.T, timeout time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "grun"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("grun %s did not finish within %v (a hang):\n%s", strings.Join(args, " "), timeout, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("grun %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), code
}

// TestCollectivesAcrossProcesses runs every collective, type and op in
// separate processes, for several rank counts, and checks every rank
// reported success.
func TestCollectivesAcrossProcesses(t *testing.T) {
	// In the quick check TestSHMAcrossProcesses runs the same 3-rank job
	// (auto chooses shm on one host) with more checks.
	testmode.SkipIfQuick(t)
	for _, n := range []int{1, 2, 3, 4, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			out, code := grun(t, 3*time.Minute, nil, "-n", fmt.Sprint(n), filepath.Join(bin, "collcheck"))
			if code != 0 {
				t.Fatalf("exit code %d:\n%s", code, out)
			}
			for r := 0; r < n; r++ {
				want := fmt.Sprintf("rank %d of %d: ok", r, n)
				if !strings.Contains(out, want) {
					t.Errorf("no %q in the output:\n%s", want, out)
				}
			}
		})
	}
}

// TestExampleAllReduce runs the example a newcomer copies, on 4 ranks, and
// checks its one line of output.
func TestExampleAllReduce(t *testing.T) {
	t.Parallel()
	out, code := grun(t, 2*time.Minute, nil, "-n", "4", filepath.Join(bin, "allreduce"), "-count", "100003", "-iters", "3")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	re := regexp.MustCompile(`^allreduce ok: 4 ranks, 100003 float32 \(0\.4 MiB\), \S+ per call, busbw [0-9.]+ GB/s\n$`)
	if !re.MatchString(out) {
		t.Fatalf("output does not match %v:\n%q", re, out)
	}
}

// TestRankDiesMidJob kills one rank part-way through the collectives: the
// others must fail (not hang) and grun must exit non-zero naming the rank
// that died and its status. The survivors exit with status 1 as soon as
// they notice, sometimes before grun has reaped the dead rank: a SIGKILL
// death must still be the one grun reports, and an exit status must at
// least be named among the failures.
func TestRankDiesMidJob(t *testing.T) {
	testmode.SkipIfQuick(t)
	tests := []struct {
		how  string
		code int    // grun's exit status; 0: any non-zero
		msg  string // regexp grun's output must match
	}{
		{how: "kill", code: 137, msg: `grun: rank 2 \(pid \d+\) killed by signal SIGKILL`},
		{how: "exit", msg: `grun: .*rank 2 (\(pid \d+\) )?exited with status 3`},
	}
	for _, tc := range tests {
		t.Run(tc.how, func(t *testing.T) {
			start := time.Now()
			out, code := grun(t, 2*time.Minute, []string{"GOCOLL_TIMEOUT=60s"},
				"-n", "4", filepath.Join(bin, "collcheck"), "-die-rank", "2", "-die-after", "25", "-die-how", tc.how)
			if code == 0 || tc.code != 0 && code != tc.code {
				t.Errorf("exit code %d, want %d (the dead rank's status):\n%s", code, tc.code, out)
			}
			if !regexp.MustCompile(tc.msg).MatchString(out) {
				t.Errorf("grun's message does not match %s:\n%s", tc.msg, out)
			}
			if strings.Contains(out, ": ok,") {
				t.Errorf("a rank reported success although a peer died:\n%s", out)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %v to notice a dead rank", d)
			}
		})
	}
}

// TestKillAtRandomPoints SIGKILLs a random rank of a 4-rank job at a
// random moment (while connecting, between collectives, inside a pipelined
// ring) of a seeded stream of checked allreduces, broadcasts and barriers,
// many times, over TCP and shared memory in turn. Every survivor must fail
// with an error naming the dead rank within 2 s of the death, and grun must
// exit 137 naming it.
// GOCOLL_KILLS sets the number of kills (default 16).
func TestKillAtRandomPoints(t *testing.T) {
	testmode.SkipIfQuick(t)
	kills := 16
	if v, err := strconv.Atoi(os.Getenv("GOCOLL_KILLS")); err == nil && v > 0 {
		kills = v
	}
	const size, bound = 4, 2 * time.Second
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	line := regexp.MustCompile(`(?m)^chaos: (?:kill rank (\d+)|rank (\d+) failed) at (\d+)(?:: (.*))?$`)
	var worst time.Duration
	survived := 0
	for k := 0; k < kills; k++ {
		victim := rng.IntN(size)
		after := time.Duration(rng.IntN(400)) * time.Millisecond
		seed := rng.Uint64()
		args := []string{"-n", fmt.Sprint(size), filepath.Join(bin, "chaos"),
			"-seed", fmt.Sprint(seed), "-victim", fmt.Sprint(victim), "-after", after.String()}
		tr := []string{"tcp", "shm"}[k%2]
		out, code := grun(t, time.Minute, []string{"GOCOLL_TIMEOUT=60s", "GOCOLL_TRANSPORT=" + tr}, args...)
		fail := func(format string, a ...any) {
			t.Errorf("kill %d (GOCOLL_TRANSPORT=%s grun %s): %s\n%s", k, tr, strings.Join(args, " "), fmt.Sprintf(format, a...), out)
		}
		if code != 137 {
			fail("grun exited %d, want 137 (the victim's SIGKILL)", code)
		}
		if !regexp.MustCompile(fmt.Sprintf(`grun: rank %d \(pid \d+\) killed by signal SIGKILL`, victim)).MatchString(out) {
			fail("grun does not name rank %d as killed", victim)
		}
		var died int64
		failed := map[int]int64{}
		for _, m := range line.FindAllStringSubmatch(out, -1) {
			at, _ := strconv.ParseInt(m[3], 10, 64)
			if m[1] != "" {
				died = at
				continue
			}
			r, _ := strconv.Atoi(m[2])
			failed[r] = at
			if !strings.Contains(m[4], fmt.Sprintf("rank %d", victim)) {
				fail("rank %d's error does not name the dead rank %d: %s", r, victim, m[4])
			}
		}
		if died == 0 {
			fail("the victim did not report its death")
			continue
		}
		ok := true
		for r := 0; r < size; r++ {
			if r == victim {
				continue
			}
			at, seen := failed[r]
			if !seen {
				fail("survivor rank %d reported no failure", r)
				ok = false
				continue
			}
			d := time.Duration(at - died)
			worst = max(worst, d)
			if d > bound {
				fail("rank %d took %v to notice, above %v", r, d, bound)
				ok = false
			}
		}
		if ok && code == 137 {
			survived++
		}
	}
	t.Logf("kills tried %d, survived (every survivor failed in time naming the dead rank) %d, worst detection %v", kills, survived, worst)
}

// TestSingleton starts the example by hand, with no launcher's variables:
// it runs as a job of one rank and says so once at info level. A
// launcher's environment that is incomplete still fails at once, naming
// what is missing.
func TestSingleton(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filepath.Join(bin, "allreduce"), "-count", "1000", "-iters", "2")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GOCOLL_DEBUG=info"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("without a launcher: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^allreduce ok: 1 ranks, 1000 float32`).Match(out) {
		t.Errorf("no one-rank result line:\n%s", out)
	}
	if n := strings.Count(string(out), "running as a job of one rank"); n != 1 {
		t.Errorf("the singleton line appears %d times, want once:\n%s", n, out)
	}

	cmd = exec.Command(filepath.Join(bin, "allreduce"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GRUN_RANK=0"}
	out, err = cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ran with half of grun's environment:\n%s", out)
	}
	if !strings.Contains(string(out), "bad launch environment") || !strings.Contains(string(out), "GRUN_SIZE") {
		t.Errorf("error does not name the missing variable:\n%s", out)
	}
}

// TestBadSIMD: a GOCOLL_SIMD the kernels cannot honour fails Init with a
// message naming the variable, on every rank; a good one runs.
func TestBadSIMD(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"avx9000", "sse2"} {
		out, code := grun(t, time.Minute, []string{"GOCOLL_SIMD=" + v}, "-n", "2", filepath.Join(bin, "allreduce"), "-count", "1000", "-iters", "2")
		if v == "sse2" {
			if code != 0 || !strings.Contains(out, "allreduce ok") {
				t.Errorf("GOCOLL_SIMD=sse2: exit %d:\n%s", code, out)
			}
			continue
		}
		if code == 0 || !strings.Contains(out, `GOCOLL_SIMD="avx9000": want one of off, sse2, avx2, avx512, auto: invalid argument`) {
			t.Errorf("GOCOLL_SIMD=%s: exit %d, want a failure naming the variable:\n%s", v, code, out)
		}
	}
}
