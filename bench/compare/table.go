package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bench/internal/report"
)

// printTables writes the comparison: a header saying what ran where, the
// raw times with their spread, then busbw and the ratios.
func printTables(w io.Writer, o options, sides []side, res []report.Result, membw float64) {
	host, _ := os.Hostname()
	cores, model := report.Machine()
	if model == "" {
		model = "unknown CPU"
	}
	fmt.Fprintf(w, "# allreduce float32 sum, %d ranks; host %s (%d cores, %s); %s\n",
		o.n, host, cores, model, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	order := "same order every round"
	if o.alternate && len(sides) > 1 {
		order = "first side rotated from round to round"
	}
	fmt.Fprintf(w, "# %d round(s), each running every side once, %s\n", o.repeat, order)
	if o.hosts > 0 {
		fmt.Fprintf(w, "# across %d network-namespace hosts × %s rank(s), each host's link shaped by tbf to %s each way: line rate %.4f GB/s\n",
			o.hosts, layoutString(o.layout), o.rate, o.rateBps/8/1e9)
	}
	for _, s := range sides {
		fmt.Fprintf(w, "# %-7s %s\n", s.name+":", s.about)
		for _, f := range s.failed {
			fmt.Fprintf(w, "# %-7s failed %s (left out)\n", "", f)
		}
	}
	if membw > 0 {
		fmt.Fprintf(w, "# one core's memory copy: %.1f GB/s\n", membw)
	}

	fmt.Fprintf(w, "\n# time per call in µs (slowest rank's mean): median [min-max] over %d round(s)\n", o.repeat)
	bySize := make([]map[int64]report.Row, len(res))
	for i, r := range res {
		bySize[i] = map[int64]report.Row{}
		for _, row := range r.Rows {
			bySize[i][row.Size] = row
		}
	}
	sizes := []int64{}
	for _, row := range res[0].Rows {
		sizes = append(sizes, row.Size)
	}
	printGrid(w, sides, sizes, bySize, func(row report.Row) string {
		return fmt.Sprintf("%.2f [%.2f-%.2f]", row.TimeUS, row.TimeMinUS, row.TimeMaxUS)
	})
	if o.rateBps > 0 {
		printLineRate(w, o, sides, sizes, bySize)
	}
	if len(sides) < 2 {
		return
	}

	fmt.Fprintf(w, "\n# busbw in GB/s from the median time; ratio = gocoll's median time / the peer's (below 1: gocoll faster)\n")
	fmt.Fprintf(w, "%10s", "size(B)")
	for _, s := range sides {
		fmt.Fprintf(w, " %8s", s.name)
	}
	for _, s := range sides[1:] {
		fmt.Fprintf(w, " %8s", "/"+s.name)
	}
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.name
	}
	fmt.Fprintf(w, "  #wrong(%s)\n", strings.Join(names, "/"))
	logSum := make([]float64, len(sides))
	count, faster := make([]int, len(sides)), make([]int, len(sides))
	for _, size := range sizes {
		fmt.Fprintf(w, "%10d", size)
		for i := range sides {
			if row, ok := bySize[i][size]; ok {
				fmt.Fprintf(w, " %8.4f", row.BusBW)
			} else {
				fmt.Fprintf(w, " %8s", "-")
			}
		}
		ours := bySize[0][size]
		for i := 1; i < len(sides); i++ {
			row, ok := bySize[i][size]
			if !ok || row.TimeUS <= 0 || ours.TimeUS <= 0 {
				fmt.Fprintf(w, " %8s", "-")
				continue
			}
			r := ours.TimeUS / row.TimeUS
			fmt.Fprintf(w, " %8.3f", r)
			logSum[i] += math.Log(r)
			count[i]++
			if r < 1 {
				faster[i]++
			}
		}
		wrong := make([]string, len(sides))
		for i := range sides {
			wrong[i] = "-"
			if row, ok := bySize[i][size]; ok {
				wrong[i] = fmt.Sprint(row.Wrong)
			}
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(wrong, "/"))
	}
	fmt.Fprintln(w)
	for i := 1; i < len(sides); i++ {
		if count[i] == 0 {
			continue
		}
		fmt.Fprintf(w, "# gocoll vs %s: time ratio %.3f (geometric mean over %d sizes); gocoll faster at %d of them\n",
			sides[i].name, math.Exp(logSum[i]/float64(count[i])), count[i], faster[i])
	}
}

// busbwSpread is a row's busbw at its median, fastest and slowest time.
func busbwSpread(r report.Row) (med, lo, hi float64) {
	med, lo, hi = r.BusBW, r.BusBW, r.BusBW
	if r.TimeMaxUS > 0 {
		lo = r.BusBW * r.TimeUS / r.TimeMaxUS
	}
	if r.TimeMinUS > 0 {
		hi = r.BusBW * r.TimeUS / r.TimeMinUS
	}
	return med, lo, hi
}

// printLineRate writes busbw median [min-max] per side and the median's
// fraction of the shaped line rate: the physical limit a ring approaches.
func printLineRate(w io.Writer, o options, sides []side, sizes []int64, bySize []map[int64]report.Row) {
	line := o.rateBps / 8 / 1e9
	fmt.Fprintf(w, "\n# busbw in GB/s: median [min-max] over %d round(s), and the median as a fraction of the line rate (%.4f GB/s)\n", o.repeat, line)
	printGrid(w, sides, sizes, bySize, func(row report.Row) string {
		med, lo, hi := busbwSpread(row)
		return fmt.Sprintf("%.4f [%.4f-%.4f] %5.1f%%", med, lo, hi, 100*med/line)
	})
}

// printGrid writes a row per size and a column per side, each cell
// cell's text for that side's row ("-" where it has none), every column
// as wide as its widest cell.
func printGrid(w io.Writer, sides []side, sizes []int64, bySize []map[int64]report.Row, cell func(report.Row) string) {
	cells := make([][]string, len(sizes))
	width := make([]int, len(sides))
	for i, s := range sides {
		width[i] = len(s.name)
	}
	for j, size := range sizes {
		cells[j] = make([]string, len(sides))
		for i := range sides {
			c := "-"
			if row, ok := bySize[i][size]; ok {
				c = cell(row)
			}
			cells[j][i], width[i] = c, max(width[i], len(c))
		}
	}
	fmt.Fprintf(w, "%10s", "size(B)")
	for i, s := range sides {
		fmt.Fprintf(w, "  %*s", width[i], s.name)
	}
	fmt.Fprintln(w)
	for j, size := range sizes {
		fmt.Fprintf(w, "%10d", size)
		for i := range sides {
			fmt.Fprintf(w, "  %*s", width[i], cells[j][i])
		}
		fmt.Fprintln(w)
	}
}
