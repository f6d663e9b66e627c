package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/internal/testmode"
)

// TestBound asserts the documented accuracy of 16-bit sums: every way of
// computing one (each allreduce algorithm, reduce-scatter, reduce) is
// within one 16-bit rounding of the exact sum plus float32's accumulation
// error, on every data set, from 2 ranks to 64 (up to 8 with -short, 3
// alone in quick mode; a 64-rank job of in-process ranks takes seconds per
// way). On the swamp data, where 16-bit partial sums lose a fixed amount
// at every step, it also asserts that the error no longer grows with the
// rank count, while the 16-bit partials model's does.
func TestBound(t *testing.T) {
	ns := []int{2, 3, 4, 5, 8, 13, 64}
	switch {
	case testmode.Quick():
		ns = []int{3} // TestTable's quick job has 2
	case testing.Short():
		ns = []int{2, 3, 4, 5, 8}
	}
	ctx := context.Background()
	for _, dt := range dtypes {
		for _, data := range datasets {
			for _, n := range ns {
				t.Run(fmt.Sprintf("%v/%s/n=%d", dt, data, n), func(t *testing.T) {
					res, err := Measure(ctx, n, 200, dt, data, "auto")
					if err != nil {
						t.Fatal(err)
					}
					if res.OfBound > 1 {
						t.Fatalf("error %.3f times the bound (%s)", res.OfBound, res.Worst)
					}
					if res.ExactOff != 0 {
						t.Fatalf("ExactSum: %d results differ from the correctly rounded sum", res.ExactOff)
					}
					if data != Swamp {
						return
					}
					// 1 and n-1 terms of 3/4 of half an ulp: exact, the
					// sum is 1 + (n-1)·3/8 ulp; rounded once, it is off by
					// at most half an ulp; the 16-bit partials model loses
					// every term.
					ulp := 0x1p-10
					if dt == reduce.BFloat16 {
						ulp = 0x1p-7
					}
					abs := 1 + float64(n-1)*0.375*ulp
					if res.Lib*abs > ulp/2 {
						t.Errorf("gocoll: error %g, over half an ulp of 1 (%g)", res.Lib*abs, ulp/2)
					}
					if want := float64(n-1) * 0.375 * ulp; n > 2 && res.Partials16*abs < want*0.99 {
						t.Errorf("16-bit partials model: error %g, want the (n-1)·3/8 ulp it must lose, %g", res.Partials16*abs, want)
					}
				})
			}
		}
	}
}

// TestTable runs the command's table on two small jobs (the 2-rank one
// alone in the quick check, where TestBound measures 3) and checks its
// shape: a header and one row per type, data set and rank count.
func TestTable(t *testing.T) {
	ns := []int{2, 3}
	if testmode.Quick() {
		ns = ns[:1]
	}
	var out bytes.Buffer
	if err := table(context.Background(), &out, ns, 16, "auto"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if want := 2 + len(dtypes)*len(datasets)*len(ns); len(lines) != want {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), want, out.String())
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != 10 {
			t.Errorf("row %q: %d fields, want 10", l, len(f))
			continue
		}
		if f[8] != "0" {
			t.Errorf("row %q: exact!=RN is %s, want 0", l, f[8])
		}
	}
}
