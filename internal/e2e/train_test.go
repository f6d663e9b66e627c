//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
)

// trainDone is examples/train's last lines on success: the loss curve's
// last point, the ranks, the parameters' checksum (the same on every
// rank, or the program fails) and their distance from a run of the same
// steps in one process (the program fails beyond 1e-9), then ok.
var trainDone = regexp.MustCompile(`(?m)^train: step (\d+) of (\d+), loss ([0-9.]+), (\d+) ranks, parameters agree on every rank \([0-9a-f]+\), with one process to (\S+)\nok$`)

// checkTrain checks a run of examples/train that should end on ranks
// ranks after steps steps, and returns its loss line.
func checkTrain(t *testing.T, out string, code int, ranks, steps string) string {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	m := trainDone.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no final line and ok (%v):\n%s", trainDone, out)
	}
	if m[1] != steps || m[2] != steps || m[4] != ranks {
		t.Errorf("ended at step %s of %s on %s ranks, want %s steps on %s:\n%s", m[1], m[2], m[4], steps, ranks, out)
	}
	t.Logf("%s", strings.ReplaceAll(m[0], "\n", " | "))
	return m[0]
}

// TestTrainExample runs the data-parallel training example: alone, as a
// program started by hand (a job of one rank), and under grun on 2 and 4
// ranks; then from a checkpoint, and under grun --elastic with a rank
// killed mid-run, and with its replacement grown back in. Every run must
// end with the parameters agreeing on every rank and with one process's.
func TestTrainExample(t *testing.T) {
	t.Parallel()
	prog := filepath.Join(bin, "train")
	t.Run("1 rank, no launcher", func(t *testing.T) {
		cmd := exec.Command(prog)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		code := 0
		if err != nil {
			code = -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
		}
		checkTrain(t, string(out), code, "1", "300")
	})
	for _, n := range []string{"2", "4"} {
		if testmode.Quick() {
			break // checkpoint and resume runs 2 ranks, then 4, to the same final line
		}
		t.Run(n+" ranks", func(t *testing.T) {
			out, code := grun(t, time.Minute, nil, "-n", n, prog)
			checkTrain(t, out, code, n, "300")
		})
	}
	t.Run("checkpoint and resume", func(t *testing.T) {
		// Stopped (rank 0 checkpoints at the end) and resumed on more ranks.
		stop, end := "120", "300"
		if testmode.Quick() {
			stop, end = "50", "120"
		}
		ckpt := filepath.Join(t.TempDir(), "mlp.ckpt")
		out, code := grun(t, time.Minute, nil, "-n", "2", prog, "-ckpt", ckpt, "-steps", stop)
		checkTrain(t, out, code, "2", stop)
		out, code = grun(t, time.Minute, nil, "-n", "4", prog, "-ckpt", ckpt, "-steps", end)
		checkTrain(t, out, code, "4", end)
		if !strings.Contains(out, "train: resumed from "+ckpt+" at step "+stop+"\n") {
			t.Errorf("did not resume at step %s:\n%s", stop, out)
		}
	})
	t.Run("elastic, rank 2 killed", func(t *testing.T) {
		// Shrinking without a replacement: TestElastic's quick case has
		// it; the next case, a loss and a replacement, stays.
		testmode.SkipIfQuick(t)
		out, code := grun(t, time.Minute, []string{"GOCOLL_TIMEOUT=30s"}, "-n", "4", "--elastic", "2", prog, "-kill", "2@100")
		checkTrain(t, out, code, "3", "300")
		if !strings.Contains(out, "grun: the job finished with 3 of 4 ranks; lost rank 2 (--elastic 2)") ||
			strings.Count(out, "3 ranks left, going on from step ") != 3 {
			t.Errorf("the survivors did not say they shrank, or grun did not name rank 2:\n%s", out)
		}
	})
	t.Run("elastic, rank 1 killed and replaced", func(t *testing.T) {
		out, code := grun(t, time.Minute, []string{"GOCOLL_TIMEOUT=30s"}, "-n", "4", "--elastic", "2:4", prog, "-kill", "1@60", "-steps", "1000")
		checkTrain(t, out, code, "4", "1000")
		if !strings.Contains(out, "lost rank 1 (--elastic 2:4)") || !strings.Contains(out, "train: replacement joined 4 ranks at step ") {
			t.Errorf("the replacement did not join:\n%s", out)
		}
	})
}
