// Command timeline draws the Chrome trace-event file that
// `grun --merge-trace` writes as a PNG: time across, a row per lane (a
// rank's calls on one communicator), a bar per call coloured by its kind,
// failed calls in red, so that a straggler shows at a glance.
//
//	GOCOLL_TRACE=trace-%r.jsonl grun -n 4 ./train
//	grun --merge-trace -o trace.json trace-*.jsonl
//	cd bench && go run ./timeline -o timeline.png ../trace.json
//
// It lives in the bench module, beside collbench's plots, so that the
// plotting library stays out of the modules of programs that import
// gocoll or build grun.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/gocoll/gocoll/internal/privfile"
	"image/color"
	"io"
	"os"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

const usage = `Usage: timeline [-o FILE.png] TRACE.json

Draws the Chrome trace-event file grun --merge-trace wrote as a PNG
timeline: a row per lane, a bar per call coloured by kind.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit status: 0, 1 when the trace
// cannot be read or drawn, 2 for bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("o", "timeline.png", "the PNG to write")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "timeline: %v\n%s", err, usage)
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "timeline: want one trace file, got %d\n%s", fs.NArg(), usage)
		return 2
	}
	tr, err := readTrace(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "timeline: %v\n", err)
		return 1
	}
	if err := drawTimeline(*out, tr); err != nil {
		fmt.Fprintf(stderr, "timeline: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "timeline: %d calls of %d lanes drawn in %s\n", len(tr.calls), len(tr.lanes), *out)
	return 0
}

// call is one complete event of the trace: a call on one lane.
type call struct {
	kind       string
	lane       int // index into trace.lanes
	start, end time.Duration
	failed     bool
}

// trace is what the timeline needs of a merged trace file.
type trace struct {
	lanes []string // names, in the order grun sorted them
	calls []call
}

// readTrace reads grun --merge-trace's output: metadata events name the
// lanes (thread_name) and order them (thread_sort_index); each complete
// event ("X", microseconds) is a call, its category the call's kind.
func readTrace(path string) (trace, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return trace{}, err
	}
	var f struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Cat  string  `json:"cat"`
			Ph   string  `json:"ph"`
			Ts   float64 `json:"ts"`
			Dur  float64 `json:"dur"`
			Tid  int     `json:"tid"`
			Args struct {
				Name      string `json:"name"`
				SortIndex int    `json:"sort_index"`
				Failed    bool   `json:"failed"`
			} `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return trace{}, fmt.Errorf("%s: not a trace-event file: %w", path, err)
	}
	names := map[int]string{}
	order := map[int]int{}
	for _, e := range f.TraceEvents {
		if e.Ph != "M" {
			continue
		}
		switch e.Name {
		case "thread_name":
			names[e.Tid] = e.Args.Name
		case "thread_sort_index":
			order[e.Tid] = e.Args.SortIndex
		}
	}
	tids := make([]int, 0, len(names))
	for tid := range names {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool { return order[tids[i]] < order[tids[j]] })
	var tr trace
	index := map[int]int{}
	for i, tid := range tids {
		index[tid] = i
		tr.lanes = append(tr.lanes, names[tid])
	}
	us := func(v float64) time.Duration { return time.Duration(v * 1e3) }
	for _, e := range f.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		l, ok := index[e.Tid]
		if !ok {
			return trace{}, fmt.Errorf("%s: call %q on thread %d, which no thread_name event names", path, e.Name, e.Tid)
		}
		tr.calls = append(tr.calls, call{kind: e.Cat, lane: l, start: us(e.Ts), end: us(e.Ts + e.Dur), failed: e.Args.Failed})
	}
	if len(tr.calls) == 0 {
		return trace{}, fmt.Errorf("%s: holds no calls", path)
	}
	return tr, nil
}

// kindColors gives each kind its colour, in a fixed order so that a
// kind keeps its colour from one timeline to the next.
var kindColors = map[string]color.RGBA{
	"allreduce":      {0x1f, 0x77, 0xb4, 0xff},
	"broadcast":      {0xd6, 0x27, 0x28, 0xff},
	"reduce":         {0x2c, 0xa0, 0x2c, 0xff},
	"allgather":      {0xff, 0x7f, 0x0e, 0xff},
	"allgatherv":     {0xff, 0xbb, 0x78, 0xff},
	"reducescatter":  {0x94, 0x67, 0xbd, 0xff},
	"reducescatterv": {0xc5, 0xb0, 0xd5, 0xff},
	"gather":         {0x8c, 0x56, 0x4b, 0xff},
	"scatter":        {0xe3, 0x77, 0xc2, 0xff},
	"alltoall":       {0x17, 0xbe, 0xcf, 0xff},
	"alltoallv":      {0x9e, 0xda, 0xe5, 0xff},
	"barrier":        {0x7f, 0x7f, 0x7f, 0xff},
}

func colorOf(kind string) color.RGBA {
	if col, ok := kindColors[kind]; ok {
		return col
	}
	return color.RGBA{0x33, 0x33, 0x33, 0xff}
}

// bars is the timeline plotter: a bar per call, in its lane's row.
type bars struct {
	calls []call
	rows  int
	scale float64 // divides nanoseconds into the x unit
	room  float64 // rows left empty on top, for the legend
}

func (b bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, k := range b.calls {
		x0 := trX(float64(k.start.Nanoseconds()) / b.scale)
		x1 := trX(float64(k.end.Nanoseconds()) / b.scale)
		switch {
		case x1-x0 < vg.Length(0.75):
			x1 = x0 + 0.75 // a call shorter than a pixel still shows
		case x1-x0 > 3:
			x1 -= 0.75 // a gap between calls that follow one another
		}
		// Lane 0 on top, as people read a list.
		y := b.rows - 1 - k.lane
		ya, yb := trY(float64(y)-0.38), trY(float64(y)+0.38)
		col := colorOf(k.kind)
		if k.failed {
			col = color.RGBA{0xff, 0x00, 0x00, 0xff}
		}
		c.FillPolygon(col, c.ClipPolygonXY([]vg.Point{{X: x0, Y: ya}, {X: x1, Y: ya}, {X: x1, Y: yb}, {X: x0, Y: yb}}))
	}
}

func (b bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	for _, k := range b.calls {
		xmax = max(xmax, float64(k.end.Nanoseconds())/b.scale)
	}
	return 0, xmax, -0.6, float64(b.rows) - 0.4 + b.room
}

// drawTimeline draws tr as a 1400-pixel-wide PNG at path.
func drawTimeline(path string, tr trace) (err error) {
	// gonum/plot panics on some degenerate inputs; say so as an error.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("drawing %s: %v", path, p)
		}
	}()
	n := len(tr.lanes)
	names := make([]plot.Tick, n)
	for i, l := range tr.lanes {
		names[i] = plot.Tick{Value: float64(n - 1 - i), Label: l}
	}
	var span time.Duration
	kinds := map[string]bool{}
	for _, k := range tr.calls {
		span = max(span, k.end)
		kinds[k.kind] = true
	}
	scale, unit := 1e6, "ms"
	if span < 10*time.Millisecond {
		scale, unit = 1e3, "µs"
	} else if span > 100*time.Second {
		scale, unit = 1e9, "s"
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("gocoll timeline: %d calls, %d lanes", len(tr.calls), n)
	p.X.Label.Text = "time since the first call (" + unit + ")"
	p.Y.Tick.Marker = plot.ConstantTicks(names)
	p.Add(plotter.NewGrid())
	// A legend entry takes about 16 pixels, a row 28: the legend gets
	// rows of its own above the lanes.
	room := float64(len(kinds))*16/28 + 0.3
	p.Add(bars{calls: tr.calls, rows: n, scale: scale, room: room})
	ks := make([]string, 0, len(kinds))
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		box, _ := plotter.NewBarChart(plotter.Values{0}, 1)
		box.Color = colorOf(k)
		box.LineStyle.Width = 0
		p.Legend.Add(k, box)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	height := vg.Length(160+28*(float64(n)+room)) * (vg.Inch / 96)
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(1400*(vg.Inch/96), height), vgimg.UseDPI(96))}
	p.Draw(draw.New(c.Canvas))
	// 0600, never through a symlink planted at its name, as grun's
	// traces are.
	f, err := privfile.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
