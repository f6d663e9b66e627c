// Command ab compares two collbench builds on the same sweep, their runs
// alternating, because on a shared machine the speed drifts from minute
// to minute and only runs taken side by side compare:
//
//	cd bench
//	git stash; go build -o /tmp/cb-a .; git stash pop; go build -o /tmp/cb-b .
//	go build -o /tmp/grun github.com/gocoll/gocoll/cmd/grun
//	go run ./ab -a /tmp/cb-a -b /tmp/cb-b -grun /tmp/grun -n 2 -rounds 5 \
//	    -- -transport shm -dtype bfloat16 -redop sum -min 64K -max 64M
//
// Each round runs both builds under grun, with the arguments after --
// and -format json; the build that goes first alternates from round to
// round. It prints, per size, each build's busbw in GB/s as min, median
// and max over the rounds, the ratio of the medians (b/a), the median and
// range of the per-round ratios (each round's b over the same round's a),
// and the wrong elements either build saw (collbench -check).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"

	"github.com/gocoll/gocoll/bench/internal/report"
)

func main() {
	a := flag.String("a", "", "the first collbench binary (the baseline)")
	b := flag.String("b", "", "the second collbench binary")
	grun := flag.String("grun", "grun", "the grun binary")
	n := flag.Int("n", 2, "ranks")
	rounds := flag.Int("rounds", 5, "rounds (each runs a and b once)")
	flag.Parse()
	if *a == "" || *b == "" || *rounds < 1 || *n < 1 {
		fmt.Fprintln(os.Stderr, "ab: need -a and -b, and -rounds and -n of at least 1")
		os.Exit(2)
	}
	var runs [2][]report.Result
	for i := 0; i < *rounds; i++ {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, k := range order {
			bin := []string{*a, *b}[k]
			args := append([]string{"-n", strconv.Itoa(*n), bin}, flag.Args()...)
			args = append(args, "-format", "json")
			cmd := exec.Command(*grun, args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "ab: round %d: %s %v: %v\n", i+1, *grun, args, err)
				os.Exit(1)
			}
			r, err := report.Decode(&out)
			if err != nil {
				fmt.Fprintf(os.Stderr, "ab: round %d, %s: %v\n", i+1, bin, err)
				os.Exit(1)
			}
			runs[k] = append(runs[k], r)
			fmt.Fprintf(os.Stderr, "ab: round %d/%d: %s done\n", i+1, *rounds, []string{"a", "b"}[k])
		}
	}
	fmt.Printf("a = %s, b = %s; %d ranks, %d rounds alternating; collbench %v\n", *a, *b, *n, *rounds, flag.Args())
	summarize(os.Stdout, runs[0], runs[1])
}

// summarize prints the table of the package documentation for the rounds
// of a and b (round i of each taken side by side).
func summarize(w io.Writer, a, b []report.Result) {
	fmt.Fprintf(w, "%10s  %-23s  %-23s  %7s  %-21s  %s\n", "size(B)", "a busbw min/med/max", "b busbw min/med/max", "b/a med", "per-round b/a med [min-max]", "#wrong")
	if len(a) == 0 {
		return
	}
	for i, row := range a[0].Rows {
		var ba, bb, ratios []float64
		wrong := int64(0)
		for r := range a {
			if r >= len(b) || i >= len(a[r].Rows) || i >= len(b[r].Rows) || a[r].Rows[i].Size != row.Size || b[r].Rows[i].Size != row.Size {
				continue
			}
			x, y := a[r].Rows[i], b[r].Rows[i]
			ba, bb = append(ba, x.BusBW), append(bb, y.BusBW)
			if x.BusBW > 0 {
				ratios = append(ratios, y.BusBW/x.BusBW)
			}
			wrong = max(wrong, x.Wrong, y.Wrong)
		}
		if len(ba) == 0 {
			continue
		}
		amin, amed, amax := stats(ba)
		bmin, bmed, bmax := stats(bb)
		rmin, rmed, rmax := stats(ratios)
		ratio := 0.0
		if amed > 0 {
			ratio = bmed / amed
		}
		fmt.Fprintf(w, "%10d  %6.3f/%6.3f/%6.3f    %6.3f/%6.3f/%6.3f    %7.3f  %5.3f [%5.3f-%5.3f]      %d\n",
			row.Size, amin, amed, amax, bmin, bmed, bmax, ratio, rmed, rmin, rmax, wrong)
	}
}

// stats is the minimum, median (the mean of the middle two for an even
// count) and maximum of xs.
func stats(xs []float64) (lo, med, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := len(s) / 2
	med = s[m]
	if len(s)%2 == 0 {
		med = (s[m-1] + s[m]) / 2
	}
	return s[0], med, s[len(s)-1]
}
