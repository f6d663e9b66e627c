//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/gocoll/gocoll/internal/privfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

const mergeUsage = `Usage: grun --merge-trace [-o FILE.json] [-png FILE.png] TRACE...

Merges the ranks' GOCOLL_TRACE files into one Chrome trace-event file
(open it in https://ui.perfetto.dev or chrome://tracing), one lane per rank
(and per sub-communicator), and draws the same timeline as a PNG: a bar per
call, coloured by kind, so a straggler shows at a glance.
`

// traced is one line of a GOCOLL_TRACE file (see comm's traceLine).
type traced struct {
	JobRank int    `json:"rank"`
	Comm    string `json:"comm"`
	Seq     uint64 `json:"seq"`
	Kind    string `json:"kind"`
	Algo    string `json:"algo"`
	Type    string `json:"type"`
	Count   int    `json:"count"`
	Op      string `json:"op"`
	Root    *int   `json:"root"`
	Bytes   int    `json:"bytes"`
	StartNs int64  `json:"start_ns"`
	EndNs   int64  `json:"end_ns"`
	Failed  bool   `json:"failed"`

	Start, End time.Time `json:"-"`
	Call       string    `json:"-"` // as errors name it
	Running    bool      `json:"-"`
}

// mergeTrace is grun --merge-trace.
func mergeTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("grun --merge-trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("o", "trace.json", "the Chrome trace-event file to write")
	png := fs.String("png", "", "also draw the timeline into this PNG")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, mergeUsage)
			return 0
		}
		fmt.Fprintf(stderr, "grun: --merge-trace: %v\n%s", err, mergeUsage)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "grun: --merge-trace: no trace files\n%s", mergeUsage)
		return exitUsage
	}
	var recs []traced
	for _, path := range fs.Args() {
		rs, err := readTrace(path)
		if err != nil {
			fmt.Fprintf(stderr, "grun: --merge-trace: %v\n", err)
			return exitUsage
		}
		recs = append(recs, rs...)
	}
	if len(recs) == 0 {
		fmt.Fprintf(stderr, "grun: --merge-trace: the files hold no calls\n")
		return exitUsage
	}
	if err := writeChromeTrace(*out, recs); err != nil {
		fmt.Fprintf(stderr, "grun: --merge-trace: %v\n", err)
		return exitInternal
	}
	fmt.Fprintf(stdout, "grun: %d calls of %d lanes written to %s\n", len(recs), len(lanesOf(recs)), *out)
	if *png != "" {
		if err := drawTimeline(*png, recs); err != nil {
			fmt.Fprintf(stderr, "grun: --merge-trace: %v\n", err)
			return exitInternal
		}
		fmt.Fprintf(stdout, "grun: timeline drawn in %s\n", *png)
	}
	return 0
}

func readTrace(path string) ([]traced, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []traced
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r traced
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: not a GOCOLL_TRACE line: %w", path, n, err)
		}
		if r.StartNs == 0 || r.Kind == "" {
			return nil, fmt.Errorf("%s:%d: not a GOCOLL_TRACE line: no start_ns or kind", path, n)
		}
		r.Start = time.Unix(0, r.StartNs)
		if r.EndNs != 0 {
			r.End = time.Unix(0, r.EndNs)
		} else {
			r.Running = true
		}
		r.Call = fmt.Sprintf("%s #%d (algo %s, %d x %s", r.Kind, r.Seq, r.Algo, r.Count, r.Type)
		if r.Op != "" {
			r.Call += ", " + r.Op
		}
		if r.Root != nil {
			r.Call += ", root " + strconv.Itoa(*r.Root)
		}
		r.Call += ")"
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// lane is one row of the timeline: a rank's calls on one communicator.
type lane struct {
	rank int
	comm string
}

func (l lane) String() string {
	if l.comm == "" {
		return "rank " + strconv.Itoa(l.rank)
	}
	return "rank " + strconv.Itoa(l.rank) + ", " + l.comm
}

// lanesOf orders the lanes: by rank, the job's communicator first.
func lanesOf(recs []traced) []lane {
	seen := map[lane]bool{}
	var ls []lane
	for _, r := range recs {
		l := lane{r.JobRank, r.Comm}
		if !seen[l] {
			seen[l] = true
			ls = append(ls, l)
		}
	}
	sort.Slice(ls, func(i, j int) bool {
		if ls[i].rank != ls[j].rank {
			return ls[i].rank < ls[j].rank
		}
		return ls[i].comm < ls[j].comm
	})
	return ls
}

// origin is the earliest start: times are shown from it.
func origin(recs []traced) time.Time {
	t0 := recs[0].Start
	for _, r := range recs {
		if r.Start.Before(t0) {
			t0 = r.Start
		}
	}
	return t0
}

// end is a record's end, or its start if it never ended.
func (r traced) end() time.Time {
	if r.End.IsZero() {
		return r.Start
	}
	return r.End
}

// writeChromeTrace writes recs in the trace-event format: complete
// events ("X", microseconds) in one process, a thread per lane, named by
// metadata events.
func writeChromeTrace(path string, recs []traced) error {
	type event struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat,omitempty"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args,omitempty"`
	}
	lanes := lanesOf(recs)
	tid := map[lane]int{}
	var evs []event
	for i, l := range lanes {
		tid[l] = i
		evs = append(evs, event{Name: "thread_name", Ph: "M", Tid: i, Args: map[string]any{"name": l.String()}},
			event{Name: "thread_sort_index", Ph: "M", Tid: i, Args: map[string]any{"sort_index": i}})
	}
	evs = append(evs, event{Name: "process_name", Ph: "M", Args: map[string]any{"name": "gocoll job"}})
	t0 := origin(recs)
	us := func(t time.Time) float64 { return float64(t.Sub(t0).Nanoseconds()) / 1e3 }
	for _, r := range recs {
		args := map[string]any{"seq": r.Seq, "bytes": r.Bytes}
		if r.Failed {
			args["failed"] = true
		}
		if r.Running {
			args["running"] = true
		}
		evs = append(evs, event{Name: r.Call, Cat: r.Kind, Ph: "X", Ts: us(r.Start), Dur: us(r.end()) - us(r.Start),
			Tid: tid[lane{r.JobRank, r.Comm}], Args: args})
	}
	b, err := json.Marshal(struct {
		TraceEvents     []event `json:"traceEvents"`
		DisplayTimeUnit string  `json:"displayTimeUnit"`
	}{evs, "ms"})
	if err != nil {
		return err
	}
	return privfile.WriteFile(path, b)
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

// bars is the timeline plotter: a bar per call, in its lane's row.
type bars struct {
	recs  []traced
	row   map[lane]int
	t0    time.Time
	scale float64 // divides nanoseconds into the x unit
	room  float64 // rows left empty on top, for the legend
}

func (b bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, r := range b.recs {
		x0 := trX(float64(r.Start.Sub(b.t0).Nanoseconds()) / b.scale)
		x1 := trX(float64(r.end().Sub(b.t0).Nanoseconds()) / b.scale)
		switch {
		case x1-x0 < vg.Length(0.75):
			x1 = x0 + 0.75 // a call shorter than a pixel still shows
		case x1-x0 > 3:
			x1 -= 0.75 // a gap between calls that follow one another
		}
		y := b.row[lane{r.JobRank, r.Comm}]
		ya, yb := trY(float64(y)-0.38), trY(float64(y)+0.38)
		col, ok := kindColors[r.Kind]
		if !ok {
			col = color.RGBA{0x33, 0x33, 0x33, 0xff}
		}
		if r.Failed {
			col = color.RGBA{0xff, 0x00, 0x00, 0xff}
		}
		c.FillPolygon(col, c.ClipPolygonXY([]vg.Point{{X: x0, Y: ya}, {X: x1, Y: ya}, {X: x1, Y: yb}, {X: x0, Y: yb}}))
	}
}

func (b bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	for _, r := range b.recs {
		xmax = max(xmax, float64(r.end().Sub(b.t0).Nanoseconds())/b.scale)
	}
	return 0, xmax, -0.6, float64(len(b.row)) - 0.4 + b.room
}

// drawTimeline draws recs as a PNG: time across, a row per lane, a bar
// per call coloured by kind.
func drawTimeline(path string, recs []traced) (err error) {
	// gonum/plot panics on some degenerate inputs; the trace is written
	// already and must not be lost to one.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("drawing %s: %v", path, p)
		}
	}()
	lanes := lanesOf(recs)
	row := map[lane]int{}
	names := make([]plot.Tick, len(lanes))
	for i, l := range lanes {
		// Rank 0 on top, as people read a list.
		row[l] = len(lanes) - 1 - i
		names[i] = plot.Tick{Value: float64(len(lanes) - 1 - i), Label: l.String()}
	}
	t0 := origin(recs)
	var span time.Duration
	for _, r := range recs {
		span = max(span, r.end().Sub(t0))
	}
	scale, unit := 1e6, "ms"
	if span < 10*time.Millisecond {
		scale, unit = 1e3, "µs"
	} else if span > 100*time.Second {
		scale, unit = 1e9, "s"
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("gocoll timeline: %d calls, %d lanes, from %s", len(recs), len(lanes), t0.Format("2006-01-02 15:04:05.000"))
	p.X.Label.Text = "time since the first call (" + unit + ")"
	p.Y.Tick.Marker = plot.ConstantTicks(names)
	p.Add(plotter.NewGrid())
	kinds := map[string]bool{}
	for _, r := range recs {
		kinds[r.Kind] = true
	}
	// A legend entry takes about 16 pixels, a row 28: the legend gets
	// rows of its own above the lanes.
	room := float64(len(kinds))*16/28 + 0.3
	p.Add(bars{recs: recs, row: row, t0: t0, scale: scale, room: room})
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		col, ok := kindColors[k]
		if !ok {
			col = color.RGBA{0x33, 0x33, 0x33, 0xff}
		}
		box, _ := plotter.NewBarChart(plotter.Values{0}, 1)
		box.Color = col
		box.LineStyle.Width = 0
		p.Legend.Add(k, box)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	height := vg.Length(160+28*(float64(len(lanes))+room)) * (vg.Inch / 96)
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(1400*(vg.Inch/96), height), vgimg.UseDPI(96))}
	p.Draw(draw.New(c.Canvas))
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
