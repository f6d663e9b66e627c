package report

import (
	"math"
	"os"
	"reflect"
	"testing"
)

func TestSizeTicks(t *testing.T) {
	var labels []string
	n := 0
	for _, tk := range (sizeTicks{}).Ticks(8, 64<<20) {
		n++
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"8", "64", "512", "4K", "32K", "256K", "2M", "16M"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if n != 24 { // 2^3 to 2^26
		t.Errorf("%d ticks, want one per power of two from 8 to 64M (24)", n)
	}
	for in, want := range map[int64]string{1: "1", 1000: "1000", 1024: "1K", 1536: "1536", 3 << 20: "3M", 1 << 30: "1G"} {
		if got := sizeLabel(in); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestPlainLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (plainLogTicks{}).Ticks(0.05, 2e6) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0.1", "1", "10", "100", "1000", "10000", "100000", "1000000", "10000000"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	labels = nil
	for _, tk := range (plainLogTicks{}).Ticks(9e-7, 0.5) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0.000001", "0.00001", "0.0001", "0.001", "0.01", "0.1", "1"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels below 1: %q, want %q", labels, want)
	}
}

func TestLabel(t *testing.T) {
	r := Result{Meta: Meta{Tool: "collbench", Transport: "shm", Op: "allgather", DType: "int8", Ranks: 4, Version: "v1.2"}}
	if got := r.Label(); got != "collbench shm allgather int8, 4 ranks @v1.2" {
		t.Errorf("label %q", got)
	}
	r.Meta.Label = "mine"
	if r.Label() != "mine" {
		t.Errorf("-label ignored: %q", r.Label())
	}
}

func TestMerge(t *testing.T) {
	mk := func(times ...float64) Result {
		r := Result{Meta: Meta{Tool: "collbench", Op: "allreduce", Ranks: 4}}
		for i, tu := range times {
			// busbw on 4 ranks: 1.5 × size/time.
			alg := float64(int64(8)<<i) / tu / 1e3
			r.Rows = append(r.Rows, Row{Size: int64(8) << i, TimeUS: tu, AlgBW: alg, BusBW: 1.5 * alg, Wrong: int64(tu) % 2})
		}
		return r
	}
	for _, tc := range []struct {
		name          string
		runs          []Result
		size          int
		med, lo, hi   float64
		runsAt, wrong int64
	}{
		{"median of 3", []Result{mk(10, 100), mk(30, 50), mk(20, 70)}, 0, 20, 10, 30, 3, 0},
		{"median of 3, second size", []Result{mk(10, 100), mk(30, 51), mk(20, 70)}, 1, 70, 51, 100, 3, 1},
		{"even count: mean of the middle two", []Result{mk(10, 100), mk(30)}, 0, 20, 10, 30, 2, 0},
		{"a size only one run has", []Result{mk(10, 100), mk(30)}, 1, 100, 100, 100, 1, 0},
	} {
		m := Merge(tc.runs)
		r := m.Rows[tc.size]
		if r.TimeUS != tc.med || r.TimeMinUS != tc.lo || r.TimeMaxUS != tc.hi || int64(r.Runs) != tc.runsAt || r.Wrong != tc.wrong {
			t.Errorf("%s: %+v, want median %v [%v-%v] over %d, wrong %d", tc.name, r, tc.med, tc.lo, tc.hi, tc.runsAt, tc.wrong)
		}
		if want := float64(r.Size) / r.TimeUS / 1e3; math.Abs(r.AlgBW-want) > 1e-12 || math.Abs(r.BusBW-1.5*want) > 1e-12 {
			t.Errorf("%s: bandwidths %v %v, want %v and 1.5x", tc.name, r.AlgBW, r.BusBW, want)
		}
	}
	if len(Merge(nil).Rows) != 0 {
		t.Error("Merge(nil) has rows")
	}
}

func TestMachine(t *testing.T) {
	cores, _ := Machine()
	if cores < 1 {
		t.Errorf("Machine() = %d cores", cores)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil && BoundCPUs() == "" {
		t.Error("BoundCPUs() empty although /proc/self/status exists")
	}
}

func TestDescribe(t *testing.T) {
	m := Meta{Tool: "collbench", Op: "allreduce", DType: "float32", Redop: "sum", Ranks: 2, Host: "vm", Cores: 2,
		CPUModel: "AMD EPYC", Date: "2026-11-25T01:02:03Z"}
	one := Result{Meta: m, Rows: []Row{{Size: 8, TimeUS: 1}}}
	merged := Result{Meta: m, Rows: []Row{{Size: 8, TimeUS: 1, Runs: 3}}}
	other := one
	other.Meta.Op, other.Meta.Ranks = "broadcast", 4
	for _, tc := range []struct {
		name       string
		in         []Result
		title, sub string
	}{
		{"one run", []Result{one}, "allreduce float32 sum, 2 ranks",
			"host vm (2 cores, AMD EPYC) · 2026-11-25 01:02 UTC · no run-to-run spread recorded"},
		{"repeated runs", []Result{one, merged}, "allreduce float32 sum, 2 ranks",
			"host vm (2 cores, AMD EPYC) · 2026-11-25 01:02 UTC · lines: median of up to 3 runs, bands: fastest to slowest run"},
		{"mixed setups", []Result{one, other}, "collectives",
			"host vm (2 cores, AMD EPYC) · 2026-11-25 01:02 UTC · no run-to-run spread recorded"},
	} {
		title, sub := describe(tc.in)
		if title != tc.title || sub != tc.sub {
			t.Errorf("%s: %q / %q, want %q / %q", tc.name, title, sub, tc.title, tc.sub)
		}
	}
}
