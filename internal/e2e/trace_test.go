package e2e

import (
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTraceMerge: a 4-rank job under GOCOLL_TRACE writes a file per rank;
// grun --merge-trace makes one Chrome trace-event file with a lane per
// rank and every call as a complete event, which bench/timeline draws
// as a PNG.
func TestTraceMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const ranks, calls = 4, 25
	out, code := grun(t, time.Minute, []string{"GOCOLL_TRACE=" + filepath.Join(dir, "trace-%r.jsonl")},
		"-n", "4", filepath.Join(bin, "straggler"), "-late", "2", "-for", "50ms", "-at", "10", "-calls", "25", "-mix")
	if code != 0 {
		t.Fatalf("job failed (%d):\n%s", code, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "trace-*.jsonl"))
	if len(files) != ranks {
		t.Fatalf("%d trace files, want %d", len(files), ranks)
	}
	merged, timeline := filepath.Join(dir, "job.json"), filepath.Join(dir, "job.png")
	out, code = grun(t, time.Minute, nil, append([]string{"--merge-trace", "-o", merged}, files...)...)
	if code != 0 || !strings.Contains(out, "100 calls of 4 lanes") {
		t.Fatalf("merge (%d):\n%s", code, out)
	}
	draw, err := exec.Command(filepath.Join(bin, "timeline"), "-o", timeline, merged).CombinedOutput()
	if err != nil || !strings.Contains(string(draw), "100 calls of 4 lanes") {
		t.Fatalf("timeline %s: %v\n%s", merged, err, draw)
	}
	b, err := os.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Ts   *float64       `json:"ts"`
			Dur  float64        `json:"dur"`
			Pid  *int           `json:"pid"`
			Tid  *int           `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	lanes := map[int]string{}
	complete := map[int]int{}
	for _, e := range tr.TraceEvents {
		if e.Pid == nil || e.Tid == nil || e.Ts == nil && e.Ph == "X" {
			t.Fatalf("event without pid, tid or ts: %+v", e)
		}
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				lanes[*e.Tid], _ = e.Args["name"].(string)
			}
		case "X":
			if *e.Ts < 0 || e.Dur < 0 || e.Name == "" {
				t.Errorf("complete event %+v", e)
			}
			complete[*e.Tid]++
		default:
			t.Errorf("event of phase %q", e.Ph)
		}
	}
	for r := range ranks {
		found := false
		for tid, name := range lanes {
			if name == "rank "+string(rune('0'+r)) {
				found = true
				if complete[tid] != calls {
					t.Errorf("lane %s: %d calls, want %d", name, complete[tid], calls)
				}
			}
		}
		if !found {
			t.Errorf("no lane for rank %d: %v", r, lanes)
		}
	}
	f, err := os.Open(timeline)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() != 1400 || img.Bounds().Dy() < 200 {
		t.Fatalf("timeline PNG: %v, %v", err, img.Bounds())
	}
}
