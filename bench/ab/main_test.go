package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/bench/internal/report"
)

func TestStats(t *testing.T) {
	for _, tc := range []struct {
		xs          []float64
		lo, med, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{3, 1, 2}, 1, 2, 3},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		lo, med, hi := stats(tc.xs)
		if lo != tc.lo || med != tc.med || hi != tc.hi {
			t.Errorf("stats(%v) = %v %v %v, want %v %v %v", tc.xs, lo, med, hi, tc.lo, tc.med, tc.hi)
		}
	}
}

// TestSummarize: per size, each build's min/median/max busbw, the ratio
// of the medians, and the per-round ratios, which pair round i of a with
// round i of b.
func TestSummarize(t *testing.T) {
	run := func(bw ...float64) report.Result {
		var r report.Result
		for i, x := range bw {
			r.Rows = append(r.Rows, report.Row{Size: int64(1024 << i), BusBW: x})
		}
		return r
	}
	a := []report.Result{run(1, 10), run(2, 10), run(4, 10)}
	b := []report.Result{run(2, 9), run(2, 8), run(2, 12)}
	var out bytes.Buffer
	summarize(&out, a, b)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header and 2 rows:\n%s", len(lines), out.String())
	}
	for i, want := range []string{
		"1024   1.000/ 2.000/ 4.000     2.000/ 2.000/ 2.000      1.000  1.000 [0.500-2.000]      0",
		"2048  10.000/10.000/10.000     8.000/ 9.000/12.000      0.900  0.900 [0.800-1.200]      0",
	} {
		if got := strings.TrimSpace(lines[i+1]); got != want {
			t.Errorf("row %d:\n got %q\nwant %q", i, got, want)
		}
	}
}
