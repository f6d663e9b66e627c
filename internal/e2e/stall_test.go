package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// line is one line of a job's output and when it came.
type line struct {
	at   time.Time
	text string
}

// streamGrun runs grun with args in dir, recording when each line of its
// output arrives; during, if not nil, runs once the job has started, with
// grun's process and a function that waits for a line containing a
// string (false if the output ended first). It returns the lines and the
// exit code.
func streamGrun(t *testing.T, dir string, timeout time.Duration, env []string, during func(p *os.Process, waitFor func(string) bool), args ...string) ([]line, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "grun"), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var lines []line
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, line{time.Now(), sc.Text()})
			mu.Unlock()
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(cmd.Process, func(s string) bool {
			for {
				mu.Lock()
				found := slices.ContainsFunc(lines, func(l line) bool { return strings.Contains(l.text, s) })
				mu.Unlock()
				if found {
					return true
				}
				select {
				case <-done:
					return false
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
	err := cmd.Wait()
	pw.Close()
	<-done
	if ctx.Err() != nil {
		t.Fatalf("grun %s did not finish within %v (a hang):\n%s", strings.Join(args, " "), timeout, joinLines(lines))
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return lines, code
}

func joinLines(ls []line) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// TestStallReport: in a 4-rank job rank 3 comes late to its third
// allreduce, sleeping in its own code or stopped by SIGSTOP. Within
// GOCOLL_STALL and a second, grun prints one report that names the call,
// the ranks waiting in it and rank 3 with what it last did (or that it
// is stopped), and writes it to a file with rank 3's goroutine stacks.
// SIGQUIT to grun asks for the same report when GOCOLL_STALL is off.
// When rank 3 is late to a broadcast, the ranks before it in the chain
// finish their part and wait in the next call, and ask for a report of
// their own: still one report, of the broadcast.
func TestStallReport(t *testing.T) {
	t.Parallel()
	const stall = time.Second
	const ar3 = `allreduce #3 \(algo ring, 262144 x float32, sum\)`
	cases := []struct {
		name string
		args []string // the straggler's
		env  []string
		quit bool // SIGQUIT to grun instead of GOCOLL_STALL
		// call is the oldest unfinished call and in the ranks in it;
		// says what the report says of the others (regexps).
		call, in string
		says     []string
		stacks   bool // rank 3's goroutine stacks are in the file
		code     int
	}{
		{"sleep", []string{"-how", "sleep"}, []string{"GOCOLL_STALL=1s"}, false, ar3, "ranks 0-2",
			[]string{`rank 3 finished allreduce #2 \(algo ring, 262144 x float32, sum\) [0-9.]+m?s ago and has not entered #3`}, true, 0},
		{"stop", []string{"-how", "stop"}, []string{"GOCOLL_STALL=1s", "GOCOLL_TIMEOUT=4s"}, false, ar3, "ranks 0-2",
			[]string{`rank 3 did not answer \(pid \d+, stopped`}, false, 1},
		{"sigquit", []string{"-how", "sleep"}, []string{"GOCOLL_STALL=off"}, true, ar3, "ranks 0-2",
			[]string{`rank 3 finished allreduce #2 .* ago and has not entered #3`}, true, 0},
		// Call 1 (-mix's second call) is a broadcast from rank 1 down the
		// chain 1, 2, 3, 0: ranks 1 and 2 go on to the allgather.
		{"gone-on", []string{"-how", "sleep", "-mix", "-at", "1", "-calls", "3"}, []string{"GOCOLL_STALL=1s"}, false,
			`broadcast #2 \(algo chain, 262144 x float32, root 1\)`, "rank 0",
			[]string{`rank 1 is in allgather #3 \(`, `rank 2 is in allgather #3 \(`,
				`rank 3 finished allreduce #1 \(algo ring, 262144 x float32, sum\) [0-9.]+m?s ago and has not entered #2`}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var quitAt time.Time
			during := func(p *os.Process, waitFor func(string) bool) {
				if tc.quit {
					// Once rank 3 is late, and the others had time to
					// enter the call it is late to: a fixed time from
					// the start missed that on a busy machine.
					waitFor("straggler: rank 3 late at")
					time.Sleep(300 * time.Millisecond)
					quitAt = time.Now()
					p.Signal(syscall.SIGQUIT)
				}
			}
			args := append([]string{"-n", "4", "--grace", "1s", filepath.Join(bin, "straggler"), "-for", "3s"}, tc.args...)
			lines, code := streamGrun(t, dir, time.Minute, tc.env, during, args...)
			out := joinLines(lines)
			if code != tc.code {
				t.Errorf("grun exited %d, want %d:\n%s", code, tc.code, out)
			}
			var lateAt, reportAt time.Time
			reports := 0
			for _, l := range lines {
				if strings.Contains(l.text, "straggler: rank 3 late at") {
					lateAt = l.at
				}
				if strings.HasPrefix(l.text, "grun: gocoll stall report:") {
					reports++
					if reportAt.IsZero() {
						reportAt = l.at
					}
				}
			}
			if reports != 1 {
				t.Fatalf("%d stall reports, want 1:\n%s", reports, out)
			}
			from, limit := lateAt, stall+time.Second
			if tc.quit {
				from, limit = quitAt, time.Second
			}
			if d := reportAt.Sub(from); from.IsZero() || d > limit || d < 0 {
				t.Errorf("report %v after the straggler was late (or SIGQUIT), want within %v:\n%s", d, limit, out)
			} else {
				t.Logf("report %v after the straggler was late (or SIGQUIT)", d.Round(time.Millisecond))
			}
			wants := []string{"grun: oldest unfinished call: " + tc.call + "\n", "grun:   in it: " + tc.in + ", waiting up to"}
			for _, say := range tc.says {
				wants = append(wants, "grun:   "+say)
			}
			for _, want := range wants {
				if !regexp.MustCompile(want).MatchString(out) {
					t.Errorf("report does not say %q:\n%s", want, out)
				}
			}
			m := regexp.MustCompile(`stall report written, with the laggards' goroutine stacks, to (\S+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no report file named:\n%s", out)
			}
			file, err := os.ReadFile(m[1])
			if err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(string(file), "main.dawdle"); has != tc.stacks || !regexp.MustCompile("oldest unfinished call: "+tc.call).Match(file) {
				t.Errorf("report file (stacks of the user's code: %v, want %v):\n%.2000s", has, tc.stacks, file)
			}
			if tc.stacks && !strings.Contains(out, "its main goroutine [sleep] is in main.dawdle (main.go:") {
				t.Errorf("the report does not say where rank 3's own code is:\n%s", out)
			}
			if tc.name == "stop" {
				// The others' timeouts say what the report saw.
				if !strings.Contains(out, "rank 3 never reached call #3 (nor answered the stall report") {
					t.Errorf("the timed-out ranks do not say rank 3 did not answer the report:\n%s", out)
				}
				if !regexp.MustCompile(`grun: rank 3 \(pid \d+\) stopped \(SIGSTOP, or a debugger\) while the others waited; then rank [0-2] `).MatchString(out) {
					t.Errorf("grun's summary does not name the stopped rank first:\n%s", out)
				}
			}
		})
	}
}
