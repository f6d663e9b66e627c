package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"github.com/gocoll/gocoll/bench/internal/report"
)

// sink is where rank 0's rows go. Every sink keeps the rows, for -plot.
type sink interface {
	begin()
	row(report.Row) error
	rows() []report.Row
	end(report.Meta) error
}

// newSink makes the sink of format; traffic adds the column moved/B
// (-traffic) to a table or CSV (JSON rows always carry the field).
func newSink(format string, w io.Writer, traffic bool) sink {
	switch format {
	case "csv":
		return &csvSink{w: csv.NewWriter(w), traffic: traffic}
	case "json":
		return &jsonSink{w: w}
	}
	return &tableSink{w: w, traffic: traffic}
}

// movedColumn is the column -traffic adds after the others.
const movedColumn = "moved/B"

type kept struct{ list []report.Row }

func (k *kept) rows() []report.Row { return k.list }

// The table's columns are nccl-tests'; size, count, time and bandwidths
// use the units of compare/peers/allreduce.c (µs, GB/s = 1e9 B/s), so the
// two tools' rows divide directly.
const (
	tableHead = "%12s %12s %8s %6s %5s %10s %12s %12s %6s  %s\n"
	tableRow  = "%12d %12d %8s %6s %5d %10.2f %12.3f %12.3f %6s  %s\n"
)

var columns = []string{"size(B)", "count", "type", "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo"}

type tableSink struct {
	kept
	w       io.Writer
	traffic bool
}

func (t *tableSink) begin() {
	h := make([]any, len(columns))
	for i, c := range columns {
		h[i] = c
	}
	head := tableHead
	if t.traffic {
		head = head[:len(head)-3] + "%-12s  %7s\n"
		h = append(h, movedColumn)
	}
	fmt.Fprintf(t.w, head, h...)
}

func (t *tableSink) row(r report.Row) error {
	t.list = append(t.list, r)
	row, args := tableRow, []any{r.Size, r.Count, r.Type, r.Redop, r.Root, r.TimeUS, r.AlgBW, r.BusBW, wrongText(r.Wrong), r.Algo}
	if t.traffic {
		row = row[:len(row)-3] + "%-12s  %7.3f\n"
		args = append(args, r.MovedPerByte)
	}
	_, err := fmt.Fprintf(t.w, row, args...)
	return err
}

func (t *tableSink) end(report.Meta) error { return nil }

func wrongText(w int64) string {
	if w < 0 {
		return "N/A"
	}
	return strconv.FormatInt(w, 10)
}

type csvSink struct {
	kept
	w       *csv.Writer
	traffic bool
}

func (c *csvSink) begin() {
	if c.traffic {
		c.w.Write(append(columns[:len(columns):len(columns)], movedColumn))
	} else {
		c.w.Write(columns)
	}
	c.w.Flush()
}

func (c *csvSink) row(r report.Row) error {
	c.list = append(c.list, r)
	rec := []string{strconv.FormatInt(r.Size, 10), strconv.FormatInt(r.Count, 10), r.Type, r.Redop, strconv.Itoa(r.Root),
		strconv.FormatFloat(r.TimeUS, 'f', 3, 64), strconv.FormatFloat(r.AlgBW, 'f', 4, 64), strconv.FormatFloat(r.BusBW, 'f', 4, 64),
		wrongText(r.Wrong), r.Algo}
	if c.traffic {
		rec = append(rec, strconv.FormatFloat(r.MovedPerByte, 'f', 4, 64))
	}
	c.w.Write(rec)
	c.w.Flush()
	return c.w.Error()
}

func (c *csvSink) end(report.Meta) error { return nil }

// jsonSink writes everything at the end: one document, metadata and rows.
type jsonSink struct {
	kept
	w io.Writer
}

func (j *jsonSink) begin() {}

func (j *jsonSink) row(r report.Row) error { j.list = append(j.list, r); return nil }

func (j *jsonSink) end(m report.Meta) error {
	rows := j.list
	if rows == nil {
		rows = []report.Row{}
	}
	return report.Write(j.w, report.Result{Meta: m, Rows: rows})
}

// progressLine shows what the sweep is doing: on a terminal one line,
// rewritten in place (an empty text clears it); elsewhere a line each.
func progressLine(w io.Writer, tty bool, text string) {
	if tty {
		fmt.Fprintf(w, "\r\x1b[K%s", text)
		return
	}
	if text != "" {
		fmt.Fprintf(w, "collbench: %s\n", text)
	}
}
