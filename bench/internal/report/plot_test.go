package report

import (
	"path/filepath"
	"testing"
)

// TestSpread: repeats of one setup give, per size, the median and the
// extremes; sizes or values a log axis cannot show are left out.
func TestSpread(t *testing.T) {
	run := func(vs ...float64) Result {
		var rows []Row
		for i, v := range vs {
			rows = append(rows, Row{Size: int64(8 << i), TimeUS: v})
		}
		return Result{Rows: rows}
	}
	med, lo, hi := spread([]Result{run(1, 10, 0), run(3, 30, 5), run(2, 20, 7), run(4, 40, 6)}, func(r Row) float64 { return r.TimeUS })
	want := [][3]float64{{2.5, 1, 4}, {25, 10, 40}, {6, 5, 7}}
	if len(med) != len(want) {
		t.Fatalf("spread: %d sizes, want %d", len(med), len(want))
	}
	for i, w := range want {
		if med[i].Y != w[0] || lo[i].Y != w[1] || hi[i].Y != w[2] || med[i].X != float64(int64(8)<<i) {
			t.Errorf("size %v: median %v, min %v, max %v; want %v", med[i].X, med[i].Y, lo[i].Y, hi[i].Y, w)
		}
	}
}

// TestShortLabelsAndCaption: the legend keeps what sets results apart, the
// title what they share; repeats plot as one series.
func TestShortLabelsAndCaption(t *testing.T) {
	m := func(tr, ver string) Result {
		return Result{Meta: Meta{Tool: "collbench", Transport: tr, Op: "allreduce", DType: "float32", Ranks: 4, Host: "h", Date: "2026-11-25T01:00:00Z", Version: ver},
			Rows: []Row{{Size: 8, TimeUS: 5, BusBW: 0.1}}}
	}
	rs := []Result{m("tcp", "a"), m("shm", "a"), m("tcp", "a")}
	labels := ShortLabels(rs)
	if labels[0] != "collbench tcp" || labels[1] != "collbench shm" {
		t.Errorf("ShortLabels = %q", labels)
	}
	if c := caption(rs); c != "allreduce float32 4 ranks; host h, 2026-11-25" {
		t.Errorf("caption = %q", c)
	}
	if g := group(rs, labels); len(g) != 2 || len(g[0].runs) != 2 {
		t.Errorf("group: %d series, the first of %d runs; want 2, and 2", len(g), len(g[0].runs))
	}
	if err := Plot(filepath.Join(t.TempDir(), "p.png"), rs, labels); err != nil {
		t.Fatal(err)
	}
}
