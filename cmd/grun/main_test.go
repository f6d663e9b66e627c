//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testprog"
)

// bin is where TestMain puts grun and the helper programs of testdata/.
var bin string

func TestMain(m *testing.M) {
	// grun and the helpers, kept between runs (see internal/testprog);
	// grun with the race detector when the tests have it.
	name, grunFlags := "grun", []string(nil)
	if raceEnabled {
		name, grunFlags = "grun-race", []string{"-race"}
	}
	testprog.Main(m, &bin, name,
		testprog.Build{Flags: grunFlags, Out: "grun", Pkgs: []string{"."}},
		testprog.Build{Pkgs: []string{"./testdata/envdump", "./testdata/lines", "./testdata/rankctl", "./testdata/storeping",
			"./testdata/argdump"}})
}

// helper is the path of a testdata program.
func helper(name string) string { return filepath.Join(bin, name) }

type result struct {
	code    int
	stdout  string
	stderr  string
	elapsed time.Duration
}

// grunCmd prepares grun as a subprocess. The context bounds a grun that
// hangs; killing it then also kills its ranks through Pdeathsig.
func grunCmd(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "grun"), args...)
	// A race-enabled binary otherwise sleeps a second before exiting 0.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

func wait(t *testing.T, cmd *exec.Cmd, stdout, stderr *bytes.Buffer, start time.Time) result {
	t.Helper()
	err := cmd.Wait()
	res := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("grun: %v", err)
	}
	if res.code < 0 {
		t.Fatalf("grun did not exit by itself (%v); stderr:\n%s", cmd.ProcessState, res.stderr)
	}
	if strings.Contains(res.stderr, "DATA RACE") {
		t.Errorf("grun has a data race:\n%s", res.stderr)
	}
	return res
}

func runGrun(t *testing.T, args ...string) result {
	t.Helper()
	cmd, stdout, stderr := grunCmd(t, args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return wait(t, cmd, stdout, stderr, start)
}

// gone reports whether pid has stopped running. A zombie has: processes
// whose parent died are reaped by init, which in some containers takes
// seconds.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(stat, ')')
	f := bytes.Fields(stat[i+1:])
	return len(f) > 0 && string(f[0]) == "Z"
}

// pidFiles reads the pid files that rankctl wrote into dir matching glob,
// keyed by file name. Any left running when the test ends are killed, so a
// failing test does not leave 60-second sleepers behind.
func pidFiles(t *testing.T, dir, glob string) map[string]int {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, glob))
	pids := make(map[string]int)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pids[filepath.Base(name)] = pid
		t.Cleanup(func() {
			if !gone(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	return pids
}

// waitFiles waits until dir holds n files matching glob.
func waitFiles(t *testing.T, dir, glob string, n int) {
	t.Helper()
	if !filesAppear(dir, glob, n) {
		t.Fatalf("%s never got %d files matching %s", dir, n, glob)
	}
}

func filesAppear(dir, glob string, n int) bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(dir, glob))
		if len(m) >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string
	}{
		{"no program", []string{"-n", "2"}, 2, "missing PROG"},
		{"no -n", []string{helper("envdump")}, 2, "missing -n"},
		{"-n 0", []string{"-n", "0", helper("envdump")}, 2, "-n 0: the number of ranks must be at least 1"},
		{"-n abc", []string{"-n", "abc", helper("envdump")}, 2, `invalid value "abc" for flag -n`},
		{"-x unset", []string{"-n", "1", "-x", "GRUN_TEST_SURELY_UNSET", helper("envdump")}, 2, "GRUN_TEST_SURELY_UNSET is not set"},
		{"-x empty name", []string{"-n", "1", "-x", "=v", helper("envdump")}, 2, "empty variable name"},
		{"-x reserved", []string{"-n", "1", "-x", "GRUN_RANK=7", helper("envdump")}, 2, "GRUN_RANK is set by grun"},
		{"bad duration", []string{"-n", "1", "--timeout", "5", helper("envdump")}, 2, `invalid value "5" for flag -timeout: not a duration`},
		{"negative grace", []string{"-n", "1", "--grace", "-1s", helper("envdump")}, 2, "must not be negative"},
		{"--elastic over -n", []string{"-n", "2", "--elastic", "3", helper("envdump")}, 2, "--elastic 3: more than the 2 ranks started"},
		{"--elastic 0", []string{"-n", "2", "--elastic", "0", helper("envdump")}, 2, "want the smallest number of ranks the job may go on with"},
		{"--elastic MAX below -n", []string{"-n", "3", "--elastic", "2:2", helper("envdump")}, 2, "--elastic 2:2: MAX is less than the 3 ranks started"},
		{"--elastic MAX below MIN", []string{"-n", "3", "--elastic", "3:2", helper("envdump")}, 2, "want MAX a number of ranks at least MIN"},
		{"--elastic MAX below a larger -n", []string{"-n", "5", "--elastic", "2:4", helper("envdump")}, 2, "--elastic 2:4: MAX is less than the 5 ranks started"},
		{"--job-file without MAX", []string{"-n", "2", "--elastic", "2", "--job-file", "job", helper("envdump")}, 2, "--job-file needs --elastic MIN:MAX"},
		{"--job-file without --elastic", []string{"-n", "2", "--job-file", "job", helper("envdump")}, 2, "--job-file needs --elastic MIN:MAX"},
		{"--join with -n", []string{"--join", "job", "-n", "2", helper("envdump")}, 2, "--join takes only -x and -v: the job's grun decides -n"},
		{"--join with --elastic", []string{"--elastic", "2:4", "--join", "job", helper("envdump")}, 2, "the job's grun decides -elastic"},
		{"--join without PROG", []string{"--join", "job"}, 2, "missing PROG: the program the joining rank runs"},
		{"--join no such file", []string{"--join", "/nonexistent/grun-job", helper("envdump")}, 2, "no such file"},
		{"--join not a job file", []string{"--join", "main.go", helper("envdump")}, 2, "main.go is not a grun job file"},
		{"unknown flag", []string{"-n", "1", "--bogus", helper("envdump")}, 2, "flag provided but not defined: -bogus"},
		{"bad --bind-to", []string{"-n", "1", "--bind-to", "socket", helper("envdump")}, 2, `invalid value "socket" for flag -bind-to: want core, none or auto`},
		{"program not found", []string{"-n", "2", "grun-test-no-such-program"}, 127, `cannot start rank 0: exec: "grun-test-no-such-program": executable file not found`},
		{"program not executable", []string{"-n", "2", "./main.go"}, 127, "permission denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runGrun(t, tc.args...)
			if res.code != tc.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", res.code, tc.code, res.stderr)
			}
			if !strings.Contains(res.stderr, tc.inStderr) {
				t.Errorf("stderr does not mention %q:\n%s", tc.inStderr, res.stderr)
			}
			if res.stdout != "" {
				t.Errorf("stdout not empty:\n%s", res.stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	// Every flag the flag set defines must be documented, spelled the
	// way users type it.
	var names []string
	newFlagSet(&config{}, os.LookupEnv).VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 {
			names = append(names, "-"+f.Name)
		} else {
			names = append(names, "--"+f.Name)
		}
	})
	if len(names) < 7 {
		t.Fatalf("only %d flags defined: %v", len(names), names)
	}
	for _, arg := range []string{"--help", "-h", "-help"} {
		t.Run(arg, func(t *testing.T) {
			res := runGrun(t, arg)
			if res.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
			}
			mentions := append(names, "-h, --help", "GRUN_RANK", "GRUN_SIZE", "GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE",
				"GRUN_ADDR", "GRUN_TOKEN", "Exit status", "124", "127", "130", "143", "128+")
			for _, m := range mentions {
				if !strings.Contains(res.stdout, m) {
					t.Errorf("help does not mention %s", m)
				}
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := parseArgs([]string{"-n", "3", "-x", "A=1=2", "--x", "HOME", "-x", "EMPTY", "--tag-output",
		"--timeout=1m", "-grace", "250ms", "--fail-wait=0", "--verbose", "prog", "-n", "9", "--", "x"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		n: 3, nSet: true, env: []string{"A=1=2", "HOME=/home/u", "EMPTY="}, tag: true,
		timeout: time.Minute, grace: 250 * time.Millisecond, verbose: true,
		prog: "prog", args: []string{"-n", "9", "--", "x"}, rsh: []string{"ssh"},
	}
	if fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	// mpirun's -np, from habit (issue 27).
	for _, np := range [][]string{{"-np", "4"}, {"--np=4"}} {
		cfg, err = parseArgs(append(np, "prog"), lookup)
		if err != nil || cfg.n != 4 || !cfg.nSet || cfg.prog != "prog" {
			t.Errorf("%q: %+v, %v; want 4 ranks of prog", np, cfg, err)
		}
	}
	cfg, err = parseArgs([]string{"-n", "1", "--", "-prog"}, lookup)
	if err != nil || cfg.prog != "-prog" || cfg.grace != defaultGrace || cfg.failWait != defaultFailWait || cfg.timeout != 0 {
		t.Errorf("after --: %+v, %v", cfg, err)
	}
}
