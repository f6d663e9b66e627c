//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// remoteShells are the login shells the remote command is run by in these
// tests: every POSIX-ish shell on this machine that users commonly have.
func remoteShells(t *testing.T) []string {
	var shells []string
	for _, sh := range []string{"sh", "dash", "bash", "ksh", "zsh"} {
		if p, err := exec.LookPath(sh); err == nil {
			shells = append(shells, p)
		}
	}
	if len(shells) == 0 {
		t.Fatal("no POSIX shell found")
	}
	return shells
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	words := []string{"", "plain", "a b", "it's", `"dq"`, `back\slash`, "$HOME", "`id`", "$(id)", "a\nb", "*", "~", "-n",
		"semi;colon", "amp&", "pipe|", "<in", "tab\there", "'", "''", "#hash", "é", "=", "a=b c"}
	for _, sh := range remoteShells(t) {
		// The shell parses the quoted words into its positional
		// parameters; printf gives each back between brackets.
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, shellQuote(w))
		}
		out, err := exec.Command(sh, "-c", "set -- "+strings.Join(quoted, " ")+`; for a in "$@"; do printf '[%s]' "$a"; done`).Output()
		if err != nil {
			t.Fatalf("%s: %v", sh, err)
		}
		var want strings.Builder
		for _, w := range words {
			fmt.Fprintf(&want, "[%s]", w)
		}
		if string(out) != want.String() {
			t.Errorf("%s: the words came back as\n%q\nwant\n%q", sh, out, want.String())
		}
	}
}

// wrapper runs the remote command under sh as rsh would, with a pipe for
// stdin that the test holds; the token goes first, as rshStarter sends it.
type wrapper struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout bytes.Buffer
	stderr bytes.Buffer
}

func startWrapper(t *testing.T, sh, dir string, env []string, prog string, args ...string) *wrapper {
	t.Helper()
	w := &wrapper{cmd: exec.Command(sh, "-c", remoteCommand(dir, env, prog, args))}
	w.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	// Wait also waits for the copies of stdout and stderr, which the
	// rank holds as long as it runs: without a bound, a wrapper killed
	// before its rank would make Wait hang with the rank.
	w.cmd.WaitDelay = 10 * time.Second
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stdin = r
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.stdin = pw
	t.Cleanup(func() {
		pw.Close()
		if w.cmd.ProcessState == nil {
			w.cmd.Process.Kill()
			w.cmd.Wait()
		}
	})
	if _, err := pw.WriteString("the-token\n"); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *wrapper) wait(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() {
		w.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		w.cmd.Process.Kill()
		<-done
		t.Fatalf("the wrapper did not exit; stderr:\n%s", w.stderr.String())
	}
	return w.cmd.ProcessState.ExitCode()
}

// TestRemoteCommand runs the remote command the way a remote login shell
// would and checks that the rank sees exactly the arguments, directory and
// variables it was given, whatever characters they hold.
func TestRemoteCommand(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), `a dir with 'quotes', "double" and $dollars`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"", "two words", "it's", `back\slash`, "$(touch pwned)", "new\nline", "*", "-x", "A=B"}
	env := []string{"GRUN_RANK=3", "GRUN_ADDR=198.18.0.1:5555", "WEIRD=a 'b' \"c\" $d `e`\nf", "EMPTY="}
	for _, sh := range remoteShells(t) {
		w := startWrapper(t, sh, dir, env, helper("argdump"), args...)
		if code := w.wait(t); code != 0 {
			t.Fatalf("%s: exit status %d; stderr:\n%s", sh, code, w.stderr.String())
		}
		var got struct {
			Args []string
			Dir  string
			Env  []string
		}
		if err := json.Unmarshal(w.stdout.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v in %q", sh, err, w.stdout.String())
		}
		if !slices.Equal(got.Args, args) {
			t.Errorf("%s: args %q, want %q", sh, got.Args, args)
		}
		if got.Dir != dir {
			t.Errorf("%s: working directory %q, want %q", sh, got.Dir, dir)
		}
		for _, kv := range append(env, "GRUN_TOKEN=the-token") {
			if !slices.Contains(got.Env, kv) {
				t.Errorf("%s: %q missing from the environment %q", sh, kv, got.Env)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
			t.Fatalf("%s: an argument was run as a command", sh)
		}
	}
}

// TestRemoteLifeline checks the wrapper's side of the lifeline: signal
// names on stdin reach the rank and its children, and the end of stdin
// kills them, also when the wrapper itself was killed first (ssh gone).
func TestRemoteLifeline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctl  []string // rankctl's flags besides -dir
		act  func(t *testing.T, w *wrapper)
		code int    // the wrapper's exit status; -1: killed
		sig  string // what -record wrote
	}{
		{
			name: "TERM line", ctl: []string{"-record", "-child"}, code: 0, sig: "terminated",
			act: func(t *testing.T, w *wrapper) { w.stdin.WriteString("TERM\n") },
		},
		{
			// Sent as TERM: the rank was started with SIGINT ignored.
			name: "INT line", ctl: []string{"-record", "-child"}, code: 0, sig: "terminated",
			act: func(t *testing.T, w *wrapper) { w.stdin.WriteString("INT\n") },
		},
		{
			name: "stdin closed", ctl: []string{"-child", "-ignore-term"}, code: 128 + 9,
			act: func(t *testing.T, w *wrapper) { w.stdin.Close() },
		},
		{
			name: "wrapper killed, then stdin closed", ctl: []string{"-child", "-ignore-term"}, code: -1,
			act: func(t *testing.T, w *wrapper) {
				// Not reaped (wait would wait for the rank's output
				// too): a zombie is dead enough for ssh to be gone.
				w.cmd.Process.Signal(syscall.SIGKILL)
				deadline := time.Now().Add(10 * time.Second)
				for !gone(w.cmd.Process.Pid) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if !gone(w.cmd.Process.Pid) {
					t.Fatal("the wrapper survived SIGKILL")
				}
				w.stdin.Close()
			},
		},
	}
	for _, sh := range remoteShells(t) {
		for _, tc := range tests {
			t.Run(filepath.Base(sh)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				w := startWrapper(t, sh, dir, []string{"GRUN_RANK=0"}, helper("rankctl"), append([]string{"-dir", dir}, tc.ctl...)...)
				waitFiles(t, dir, "rank-0.pid", 1)
				pids := pidFiles(t, dir, "*.pid")
				if len(pids) != 2 {
					t.Fatalf("pid files %v, want the rank's and its child's", pids)
				}
				tc.act(t, w)
				code := w.wait(t)
				if code != tc.code {
					t.Errorf("exit status %d, want %d; stderr:\n%s", code, tc.code, w.stderr.String())
				}
				if tc.sig != "" {
					got, err := os.ReadFile(filepath.Join(dir, "sig-0"))
					if string(got) != tc.sig {
						t.Errorf("the rank recorded %q (%v), want %q", got, err, tc.sig)
					}
				}
				deadline := time.Now().Add(5 * time.Second)
				for name, pid := range pids {
					for !gone(pid) && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
					if !gone(pid) {
						t.Errorf("%s: pid %d still running", name, pid)
					}
				}
			})
		}
	}
}
