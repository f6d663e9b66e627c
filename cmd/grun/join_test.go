//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
)

// TestJoin runs a job of 1 rank under --elastic 1:2 --job-file and adds
// ranks to it with grun --join: the job file is private (0600) and gone
// after the job; a joiner gets the job's environment plus its own -x, its
// output comes out of the job's grun with its rank's prefix and its exit
// is counted; one past MAX is refused with status 3 and says why; the
// job's grun ends saying how many ranks joined. The test plays the ranks'
// part of saying in the store that the job runs (comm does that in a
// real job), which grun waits for before it admits anyone.
func TestJoin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jf := filepath.Join(dir, "job")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	main := exec.CommandContext(ctx, filepath.Join(bin, "grun"), "-n", "1", "--elastic", "1:2", "--job-file", jf, "--tag-output",
		helper("rankctl"), "-sleeper", "-sleep", "3s")
	main.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var stdout bytes.Buffer
	main.Stdout = &stdout
	errPipe, err := main.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := main.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var stderr []string
	waitFor := func(what string) {
		t.Helper()
		for l := range lines {
			stderr = append(stderr, l)
			if strings.Contains(l, what) {
				return
			}
		}
		t.Fatalf("the job's grun never said %q:\n%s", what, strings.Join(stderr, "\n"))
	}

	var st os.FileInfo
	for range 200 {
		if st, err = os.Stat(jf); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no job file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("job file mode %v, want 0600: it holds the token", st.Mode().Perm())
	}
	f, err := readJobFile(jf)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := bootstrap.Dial(ctx, f.store, []byte(f.token))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := sc.Put(ctx, bootstrap.ElasticRunningKey, []byte("1")); err != nil {
		t.Fatal(err)
	}

	// A joiner that ends at once, exit 0: its environment is printed by
	// the job's grun, under its rank.
	res := runGrun(t, "--join", jf, "-x", "GRUN_TEST_JOINER=yes", helper("envdump"), "GRUN_TEST_JOINER", "GOCOLL_ELASTIC")
	if res.code != 0 || res.stdout != "" {
		t.Fatalf("grun --join exited %d, stdout %q, want 0 and nothing (the output goes to the job's grun); stderr:\n%s", res.code, res.stdout, res.stderr)
	}
	waitFor("rank 1 joined from host")
	// A joiner that stays: the job has its MAX of 2 ranks while it runs.
	second, sout, serr := grunCmd(t, "--join", jf, helper("rankctl"), "-sleeper", "-sleep", "1500ms")
	start := time.Now()
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor("rank 2 joined from host")
	res = runGrun(t, "--join", jf, helper("envdump"))
	if res.code != exitRefused || !strings.Contains(res.stderr, "grun: --join: the job refused this process: the job runs 2 ranks already, the most --elastic 1:2 allows") {
		t.Errorf("a joiner past MAX: exit %d, want %d, and stderr saying why:\n%s", res.code, exitRefused, res.stderr)
	}
	if r := wait(t, second, sout, serr, start); r.code != 0 {
		t.Errorf("the second joiner exited %d:\n%s", r.code, r.stderr)
	}
	for l := range lines {
		stderr = append(stderr, l)
	}
	if err := main.Wait(); err != nil {
		t.Fatalf("the job's grun: %v:\n%s", err, strings.Join(stderr, "\n"))
	}
	for _, want := range []string{"[1] 0 GRUN_TEST_JOINER=yes\n", "[1] 0 GOCOLL_ELASTIC=1\n", "[1] 0 GRUN_SIZE=1\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the job's grun did not print the joiner's %q:\n%s", want, stdout.String())
		}
	}
	want := "grun: the job finished with 3 ranks, 2 of them started by grun --join (--elastic 1:2)"
	if last := stderr[len(stderr)-1]; last != want {
		t.Errorf("the job's grun ended with %q, want %q:\n%s", last, want, strings.Join(stderr, "\n"))
	}
	if _, err := os.Stat(jf); !os.IsNotExist(err) {
		t.Errorf("the job file is left behind after the job (%v)", err)
	}
}
