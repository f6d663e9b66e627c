package stallreport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func running(call string, no uint64, d time.Duration) CommStatus {
	return CommStatus{Running: true, Call: call, CallNo: no, For: d}
}

func idle(call string, no uint64, d time.Duration) CommStatus {
	return CommStatus{Call: call, CallNo: no, Idle: d}
}

func TestBuild(t *testing.T) {
	const ar7 = "allreduce #7 (algo ring, 16 x float32, sum)"
	const ar6 = "allreduce #6 (algo ring, 16 x float32, sum)"
	in := func(rank int, d time.Duration) Status {
		return Status{Rank: rank, Comms: []CommStatus{running(ar7, 7, d)}}
	}
	cases := []struct {
		name     string
		size     int
		answers  map[int]Status
		notes    func(int) string
		want     []string
		laggards []int
	}{
		{
			"one idle laggard, its stacks kept",
			4,
			map[int]Status{0: in(0, 42*time.Second), 1: in(1, 41*time.Second), 2: in(2, 40*time.Second),
				3: {Rank: 3, PID: 77, Host: "h", Comms: []CommStatus{idle(ar6, 6, 41900*time.Millisecond)}, Stacks: "main.work()"}},
			nil,
			[]string{"oldest unfinished call: " + ar7, "in it: ranks 0-2, waiting up to 42s",
				"rank 3 finished " + ar6 + " 42s ago and has not entered #7"},
			[]int{3},
		},
		{
			"a rank that did not answer, with the launcher's note",
			3,
			map[int]Status{0: in(0, time.Second), 2: in(2, time.Second)},
			func(r int) string { return "pid 12, stopped" },
			[]string{"in it: ranks 0, 2", "rank 1 did not answer (pid 12, stopped)"},
			[]int{1},
		},
		{
			"mismatched arguments in one call number",
			3,
			map[int]Status{0: in(0, time.Second), 1: in(1, time.Second),
				2: {Rank: 2, Comms: []CommStatus{running("allreduce #7 (algo ring, 17 x float32, sum)", 7, time.Second)}}},
			nil,
			[]string{"MISMATCHED: rank 2 called allreduce #7 (algo ring, 17 x float32, sum); ranks 0-1 called " + ar7},
			nil,
		},
		{
			"a laggard busy on a sub-communicator",
			2,
			map[int]Status{0: in(0, 3*time.Second),
				1: {Rank: 1, Comms: []CommStatus{idle(ar6, 6, 3*time.Second), {Name: "split #1 color 0", Running: true, Call: "barrier #2 (algo dissemination)", CallNo: 2, For: 2 * time.Second}}}},
			nil,
			[]string{"rank 1 finished " + ar6 + " 3s ago and has not entered #7; it is in barrier #2 (algo dissemination) of split #1 color 0 for 2s"},
			[]int{1},
		},
		{
			"a sub-communicator's call, the job's idle",
			4,
			map[int]Status{
				0: {Rank: 0, Comms: []CommStatus{idle(ar6, 6, 9*time.Second)}},
				1: {Rank: 1, Comms: []CommStatus{idle(ar6, 6, 9*time.Second), {Name: "split #1 color 1", Rank: 0, Running: true, Call: "barrier #2 (algo dissemination)", CallNo: 2, For: 5 * time.Second}}},
				2: {Rank: 2, Comms: []CommStatus{idle(ar6, 6, 9*time.Second)}},
				3: {Rank: 3, Comms: []CommStatus{idle(ar6, 6, 9*time.Second), {Name: "split #1 color 1", Rank: 1, Call: "allreduce #1 (algo rd, 1 x int32, sum)", CallNo: 1, Idle: 6 * time.Second}}, Stacks: "main.work()"},
			},
			nil,
			[]string{"oldest unfinished call: barrier #2 (algo dissemination) of split #1 color 1", "in it: rank 1, waiting up to 5s",
				"rank 3 (rank 1 of it) finished allreduce #1 (algo rd, 1 x int32, sum) 6s ago and has not entered #2"},
			[]int{3},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Build("test", tc.size, tc.answers, tc.notes)
			for _, w := range tc.want {
				if !strings.Contains(r.Text, w) {
					t.Errorf("report does not say %q:\n%s", w, r.Text)
				}
			}
			// Waited is the wait the report prints for the call (grun
			// dates a stall's start by it).
			if w := "waiting up to " + round(r.Waited).String(); r.Call != "" && !strings.Contains(r.Text, w) {
				t.Errorf("waited %v, but the report does not say %q:\n%s", r.Waited, w, r.Text)
			}
			if tc.name == "one idle laggard, its stacks kept" && r.Waited != 42*time.Second {
				t.Errorf("waited %v, want 42s", r.Waited)
			}
			if !slices.Equal(r.Laggards, tc.laggards) {
				t.Errorf("laggards %v, want %v", r.Laggards, tc.laggards)
			}
			if r.Call != ar7 && !strings.Contains(tc.name, "mismatched") && !strings.Contains(tc.name, "sub-communicator's call") {
				t.Errorf("call %q, want %q", r.Call, ar7)
			}
			if got := strings.Contains(r.Stacks, "main.work()"); got != (tc.name == "one idle laggard, its stacks kept" || strings.Contains(tc.name, "sub-communicator's call")) {
				t.Errorf("stacks %q", r.Stacks)
			}
		})
	}
}

func TestRanks(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "no rank"}, {[]int{3}, "rank 3"}, {[]int{0, 1, 2, 5, 7, 8}, "ranks 0-2, 5, 7-8"},
	} {
		if got := Ranks(tc.in); got != tc.want {
			t.Errorf("Ranks(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestGatherAndWrite: answers are read as they come, a stopped rank is
// waited for no longer than Wait, and the file holds the text and stacks.
func TestGatherAndWrite(t *testing.T) {
	store := map[string][]byte{
		AnswerKey(2, 0): Encode(Status{Rank: 0, Comms: []CommStatus{running("x #1 (y)", 1, time.Second)}}),
		AnswerKey(2, 9): Encode(Status{Rank: 9}), // not a rank of the job
		AnswerKey(1, 1): Encode(Status{Rank: 1}), // another request's
	}
	scan := func(_ context.Context, prefix string) (map[string][]byte, error) {
		m := map[string][]byte{}
		for k, v := range store {
			if strings.HasPrefix(k, prefix) {
				m[k] = v
			}
		}
		return m, nil
	}
	start := time.Now()
	got := Gather(context.Background(), scan, 2, 2)
	if d := time.Since(start); d < Wait || d > Wait+time.Second {
		t.Errorf("Gather took %v with a rank not answering, want about %v", d, Wait)
	}
	if len(got) != 1 || got[0].Comms[0].Call != "x #1 (y)" {
		t.Errorf("Gather = %+v", got)
	}
	// WriteFile writes to the working directory (the test runs alone).
	wd, _ := os.Getwd()
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	path := Report{Text: "text\n", Stacks: "stacks\n"}.WriteFile("r.txt")
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "text\n\nstacks\n" || filepath.Base(path) != "r.txt" {
		t.Errorf("WriteFile wrote %q to %s (%v)", b, path, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("report mode %v (%v), want 0600: stacks are private", fi.Mode(), err)
	}
}

func TestMainAt(t *testing.T) {
	stacks := "goroutine 7 [running]:\nruntime/pprof.writeGoroutineStacks(0x1)\n\t/go/src/runtime/pprof/pprof.go:819 +0x6b\n\n" +
		"goroutine 1 [sleep, 2 minutes]:\ntime.Sleep(0xb2d05e00)\n\t/go/src/runtime/time.go:363 +0x165\nmain.dawdle(...)\n\t/src/prog/main.go:58\nmain.main()\n\t/src/prog/main.go:33 +0xf8\n\n" +
		"goroutine 20 [select]:\ngithub.com/gocoll/gocoll/bootstrap.WatchParent.func2()\n\t/src/bootstrap/parent.go:43 +0xc5\n"
	if got, want := mainAt(stacks), "[sleep, 2 minutes] is in main.dawdle (main.go:58)"; got != want {
		t.Errorf("mainAt = %q, want %q", got, want)
	}
	lib := "goroutine 1 [chan receive]:\nsync.(*WaitGroup).Wait(0x1)\n\t/go/src/sync/waitgroup.go:118 +0x48\ngithub.com/x/y.(*T).Step(0x2)\n\t/src/y/t.go:9 +0x1\n"
	if got, want := mainAt(lib), "[chan receive] is in github.com/x/y.(*T).Step (t.go:9)"; got != want {
		t.Errorf("mainAt = %q, want %q", got, want)
	}
	if got := mainAt("nothing"); got != "" {
		t.Errorf("mainAt = %q, want empty", got)
	}
}

// TestWriteFilePlantedSymlink is issue 41's attack: another user plants a
// symlink at the exact name the next report will get, pointing at a file of
// the victim's. The report does not follow it: it goes, mode 0600, to the
// private temporary directory, and the victim's file is untouched.
func TestWriteFilePlantedSymlink(t *testing.T) {
	wd, tmp := t.TempDir(), t.TempDir()
	chdir(t, wd)
	t.Setenv("TMPDIR", tmp)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("grun-stall-%d-1.txt", os.Getpid())
	if err := os.Symlink(victim, filepath.Join(wd, name)); err != nil {
		t.Fatal(err)
	}
	// The same name planted in the temporary directory itself, where the
	// report went before.
	if err := os.Symlink(victim, filepath.Join(tmp, name)); err != nil {
		t.Fatal(err)
	}
	path := Report{Text: "text\n", Stacks: "goroutine 1 [running]:\n"}.WriteFile(name)
	want := filepath.Join(tmp, "gocoll-"+strconv.Itoa(os.Geteuid()), name)
	if path != want {
		t.Fatalf("report written to %q, want %q", path, want)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("report %v (%v), want a regular file of mode 0600", fi.Mode(), err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the victim's file now holds %q (%v)", b, err)
	}
	// With the private directory taken by another planted symlink, the
	// report goes nowhere, and says why.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	priv := filepath.Dir(want)
	if err := os.Remove(priv); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), priv); err != nil {
		t.Fatal(err)
	}
	if got := (Report{Text: "text\n"}).WriteFile(name); !strings.HasPrefix(got, "(nowhere: ") || !strings.Contains(got, "symlink") {
		t.Fatalf("WriteFile = %q, want nowhere, naming the symlink", got)
	}
}

// chdir moves the test into dir until it ends (the test must not be
// parallel: the working directory is the process's).
func chdir(t *testing.T, dir string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(wd) })
}
