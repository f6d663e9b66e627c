package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
)

func devShm(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatalf("list /dev/shm: %v", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestSHMAcrossProcesses runs the multi-process conformance check over
// shared memory (forced, and chosen by auto), and over two simulated hosts
// (shared memory inside each, TCP between, hierarchical allreduce),
// checking from the info log that the intended transport and algorithm ran.
func TestSHMAcrossProcesses(t *testing.T) {
	cases := []struct {
		n     int
		env   []string
		want  []string
		quick bool // in the quick check too: shm chosen by auto, and hier
	}{
		{2, []string{"GOCOLL_TRANSPORT=shm"}, []string{"transport=shm"}, false},
		{4, []string{"GOCOLL_TRANSPORT=shm"}, []string{"transport=shm"}, false},
		{3, nil, []string{"transport=shm", `why="auto: every rank on this host"`}, true},
		{4, []string{"GOCOLL_FAKE_HOSTS=2"}, []string{"transport=shm+tcp", "algo=hier"}, true},
		{5, []string{"GOCOLL_FAKE_HOSTS=2", "GOCOLL_ALGO=allreduce=ring"}, []string{"transport=shm+tcp", "algo=ring"}, false},
	}
	for _, tc := range cases {
		if testmode.Quick() && !tc.quick {
			continue // the full run (.ci/test) has it
		}
		t.Run(fmt.Sprintf("n=%d/%s", tc.n, strings.Join(tc.env, ",")), func(t *testing.T) {
			before := devShm(t)
			env := append([]string{"GOCOLL_DEBUG=info"}, tc.env...)
			args := []string{"-n", fmt.Sprint(tc.n), filepath.Join(bin, "collcheck")}
			if testmode.Quick() {
				// Every type at the small sizes, float32 at the large:
				// what the quick cases check is the path chosen.
				args = append(args, "-small")
			}
			out, code := grun(t, 3*time.Minute, env, args...)
			if code != 0 {
				t.Fatalf("exit code %d:\n%s", code, out)
			}
			for r := 0; r < tc.n; r++ {
				if want := fmt.Sprintf("rank %d of %d: ok", r, tc.n); !strings.Contains(out, want) {
					t.Errorf("no %q in the output:\n%s", want, out)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the log does not show %s:\n%s", w, out)
				}
			}
			if strings.Contains(out, "algo=hier") && !slices.Contains(tc.want, "algo=hier") {
				t.Errorf("hierarchical allreduce ran although overridden:\n%s", out)
			}
			for _, name := range devShm(t) {
				if !slices.Contains(before, name) {
					t.Errorf("/dev/shm/%s left behind", name)
				}
			}
		})
	}
}

// TestSHMRankKilled kills a rank of a shared-memory job part-way: the
// others fail promptly, grun names the dead rank, and nothing is left in
// /dev/shm.
func TestSHMRankKilled(t *testing.T) {
	testmode.SkipIfQuick(t)
	before := devShm(t)
	start := time.Now()
	out, code := grun(t, 2*time.Minute, []string{"GOCOLL_TIMEOUT=60s", "GOCOLL_TRANSPORT=shm"},
		"-n", "4", filepath.Join(bin, "collcheck"), "-die-rank", "1", "-die-after", "20", "-die-how", "kill")
	if code != 137 || !strings.Contains(out, "rank 1") || !strings.Contains(out, "SIGKILL") {
		t.Errorf("exit code %d, want 137 naming rank 1 killed:\n%s", code, out)
	}
	if strings.Contains(out, ": ok,") {
		t.Errorf("a rank reported success although a peer died:\n%s", out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to notice a dead rank", d)
	}
	for _, name := range devShm(t) {
		if !slices.Contains(before, name) {
			t.Errorf("/dev/shm/%s left behind", name)
		}
	}
}
