//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file runs README recipes under the real launchers (mpirun,
// torchrun): a job started by `bash -c RECIPE` in a directory whose
// ./train is a private copy of collcheck, so that its ranks can be told
// from every other process by their executable.

// needBinary fails the test, saying what to install, when a launcher is
// missing: a skipped launcher test would pass CI having tested nothing.
func needBinary(t *testing.T, path, pkgs string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: install it with `apt-get update && apt-get install -y %s` (CI's .ci/run does)", path, pkgs)
	}
}

// trainDir is a directory holding ./train, a copy of prog, as the
// launcher recipes name the program.
func trainDir(t *testing.T, prog string) (dir, train string) {
	t.Helper()
	dir = t.TempDir()
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(filepath.Join(bin, prog))
	if err != nil {
		t.Fatal(err)
	}
	train = filepath.Join(dir, "train")
	if err := os.WriteFile(train, b, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range trainPIDs(train) {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	return dir, train
}

type rankProc struct{ pid, rank int }

// trainPIDs lists the running processes whose executable is train, and the
// rank each was given (RANK or OMPI_COMM_WORLD_RANK in its environment; -1
// when it has neither).
func trainPIDs(train string) []rankProc {
	ents, _ := os.ReadDir("/proc")
	var out []rankProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != train {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		rank := -1
		for _, kv := range bytes.Split(env, []byte{0}) {
			k, v, _ := strings.Cut(string(kv), "=")
			if k == "OMPI_COMM_WORLD_RANK" || k == "RANK" {
				rank, _ = strconv.Atoi(v)
			}
		}
		out = append(out, rankProc{pid, rank})
	}
	return out
}

// job is a running recipe: its output lines, each stamped on arrival.
type job struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []stamped
	done   chan struct{}
	code   int
	exited time.Time
}

type stamped struct {
	at   time.Time
	text string
}

// startRecipe runs recipe with bash in dir, with the launcher variables of
// this process dropped and env added; /usr/bin comes first on PATH, for
// Debian's python3 (the one torch is installed for).
func startRecipe(t *testing.T, dir, recipe string, env ...string) *job {
	t.Helper()
	cmd := exec.Command("bash", "-c", recipe)
	cmd.Dir = dir
	cmd.Env = append(launcherEnv(), "PATH=/usr/bin:/bin:/usr/sbin:/sbin", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	j := &job{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-j.done
	})
	go func() {
		s := bufio.NewScanner(r)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			j.mu.Lock()
			j.lines = append(j.lines, stamped{time.Now(), s.Text()})
			j.mu.Unlock()
		}
		io.Copy(io.Discard, r)
	}()
	go func() {
		err := cmd.Wait()
		j.mu.Lock()
		j.exited = time.Now()
		j.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			j.code = 128 + int(ws.Signal())
		}
		_ = err
		j.mu.Unlock()
		w.Close()
		close(j.done)
	}()
	return j
}

// wait waits for the job to end, failing the test after timeout.
func (j *job) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(timeout):
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		<-j.done
		t.Fatalf("the job did not end within %v (a hang):\n%s", timeout, j.output())
	}
	time.Sleep(100 * time.Millisecond) // the last lines after the exit
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.code
}

func (j *job) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var b strings.Builder
	for _, l := range j.lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// waitLines waits until n lines match re, failing the test after timeout.
func (j *job) waitLines(t *testing.T, re *regexp.Regexp, n int, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		j.mu.Lock()
		got := 0
		for _, l := range j.lines {
			if re.MatchString(l.text) {
				got++
			}
		}
		j.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-j.done:
			t.Fatalf("the job ended with %d of %d lines matching %s:\n%s", got, n, re, j.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines matching %s after %v:\n%s", got, n, re, timeout, j.output())
		}
	}
}

// checkOK asserts the job exited 0 with every rank's collcheck success line.
func checkOK(t *testing.T, j *job, n int) {
	t.Helper()
	code := j.wait(t, 2*time.Minute)
	out := j.output()
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, out)
	}
	for r := 0; r < n; r++ {
		if want := fmt.Sprintf("rank %d of %d: ok", r, n); !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
}

// killMode says what a launcher does when a rank dies, and so what
// killRank can demand.
type killMode int

const (
	// stopsJob: the launcher ends the job and exits non-zero; it may kill a
	// survivor before the survivor has printed why it failed, so only the
	// survivors that spoke must name the dead rank, and at least one must.
	stopsJob killMode = iota
	// letsLive: the launcher waits for the survivors (mpirun with
	// recovery on, and then exits 0): every survivor must name the dead
	// rank.
	letsLive
)

// killRank runs a long job of n ranks (the recipe with collcheck's
// -rounds), SIGKILLs rank victim once every rank is past Init, and checks
// that survivors fail naming it (see killMode), that none succeeds, and
// that nothing is left running. It logs the time from the kill to the last
// survivor's error and to the launcher's exit.
func killRank(t *testing.T, name string, mode killMode, dir, train, recipe string, n, victim int, env ...string) {
	t.Helper()
	j := startRecipe(t, dir, recipe+" -addrs -rounds 1000000", env...)
	j.waitLines(t, regexp.MustCompile(`^(\[.*\]:?\s*)?rank \d+ addrs`), n, time.Minute)
	var pid int
	for _, p := range trainPIDs(train) {
		if p.rank == victim {
			pid = p.pid
		}
	}
	if pid == 0 {
		t.Fatalf("rank %d's process not found among %v", victim, trainPIDs(train))
	}
	killed := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	code := j.wait(t, time.Minute)
	out := j.output()
	if code == 0 && mode == stopsJob {
		t.Errorf("%s exited 0 after rank %d was killed:\n%s", name, victim, out)
	}
	if strings.Contains(out, ": ok,") {
		t.Errorf("a rank reported success although rank %d died:\n%s", victim, out)
	}
	failed := regexp.MustCompile(`collcheck: rank (\d+):`)
	named := regexp.MustCompile(`collcheck: rank (\d+): .*\brank ` + strconv.Itoa(victim) + `\b`)
	var last time.Time
	seen := map[string]bool{}
	j.mu.Lock()
	spoke := map[string]bool{}
	for _, l := range j.lines {
		if m := failed.FindStringSubmatch(l.text); m != nil {
			spoke[m[1]] = true
		}
		if m := named.FindStringSubmatch(l.text); m != nil && !seen[m[1]] {
			seen[m[1]] = true
			if l.at.After(last) {
				last = l.at
			}
		}
	}
	exited := j.exited
	j.mu.Unlock()
	for r := 0; r < n; r++ {
		if k := strconv.Itoa(r); r != victim && !seen[k] && (mode == letsLive || spoke[k]) {
			t.Errorf("survivor rank %d did not fail naming rank %d:\n%s", r, victim, out)
		}
	}
	if len(seen) == 0 {
		t.Errorf("no survivor named rank %d:\n%s", victim, out)
	}
	if left := trainPIDs(train); len(left) > 0 {
		t.Errorf("ranks still running after %s exited: %v", name, left)
	}
	t.Logf("%s: rank %d SIGKILLed: %d of %d survivors named it, the last after %v; %s exited (status %d) after %v",
		name, victim, len(seen), n-1, last.Sub(killed).Round(time.Millisecond), name, code, exited.Sub(killed).Round(time.Millisecond))
}

// killLauncher runs a long job, SIGKILLs the launcher process (the one bash
// ran the recipe as) once every rank is past Init, and checks that every
// rank leaves on its own, logging how long the last took.
func killLauncher(t *testing.T, name, dir, train, recipe string, n int, env ...string) {
	t.Helper()
	j := startRecipe(t, dir, recipe+" -addrs -rounds 1000000", env...)
	j.waitLines(t, regexp.MustCompile(`^(\[.*\]:?\s*)?rank \d+ addrs`), n, time.Minute)
	if len(trainPIDs(train)) != n {
		t.Fatalf("%d ranks running, want %d", len(trainPIDs(train)), n)
	}
	killed := time.Now()
	// bash execs a recipe that is one command: its pid is the launcher's.
	syscall.Kill(j.cmd.Process.Pid, syscall.SIGKILL)
	for deadline := killed.Add(30 * time.Second); len(trainPIDs(train)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ranks %v still running 30s after %s was SIGKILLed", trainPIDs(train), name)
		}
	}
	t.Logf("%s SIGKILLed: the last of its %d ranks left after %v", name, n, time.Since(killed).Round(time.Millisecond))
}
