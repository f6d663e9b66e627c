package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The PNG's size in pixels: a title, two panels side by side, and one
// legend for both beneath them, where it can hide no data.
const (
	PlotWidth  = 1400
	PlotHeight = 760
	plotDPI    = 96
)

// px is one pixel of the PNG in vg's units.
const px = vg.Inch / plotDPI

// ErrNothingToPlot reports results without a single positive value to draw
// on log axes.
var ErrNothingToPlot = errors.New("nothing to plot")

// palette is distinguishable in colour and, printed grey, by dash pattern.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
	{0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// legendRows is how many entries a legend column holds.
const legendRows = 4

// Plot draws busbw (left) and time (right) against size, on log axes, one
// line per result labelled by labels[i], into a PNG at path. A result
// merged from repeated runs (Merge) is drawn as its median with a band
// from the fastest to the slowest run. The title says what was measured,
// on which host and when.
func Plot(path string, results []Result, labels []string) (err error) {
	if len(results) != len(labels) {
		return fmt.Errorf("plot: %d results but %d labels", len(results), len(labels))
	}
	// gonum/plot panics on some degenerate inputs (an axis without range
	// on a log scale); a benchmark must not die after its measurements.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("plot %s: %v", path, p)
		}
	}()
	busbw := func(r Row) float64 { return r.BusBW }
	// busbw is inversely proportional to time: the slowest run is the lowest.
	busSpread := func(r Row) (float64, float64) {
		if r.TimeMinUS <= 0 || r.TimeMaxUS <= 0 {
			return 0, 0
		}
		return r.BusBW * r.TimeUS / r.TimeMaxUS, r.BusBW * r.TimeUS / r.TimeMinUS
	}
	bw, entries, err := panel("bus bandwidth (higher is faster)", "busbw (GB/s)", results, labels, busbw, busSpread)
	if err != nil {
		return err
	}
	lat, _, err := panel("time per call, slowest rank's mean (lower is faster)", "time (µs)", results, labels,
		func(r Row) float64 { return r.TimeUS }, func(r Row) (float64, float64) { return r.TimeMinUS, r.TimeMaxUS })
	if err != nil {
		return err
	}
	img := vgimg.NewWith(vgimg.UseWH(PlotWidth*px, PlotHeight*px), vgimg.UseDPI(plotDPI))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	title, subtitle := describe(results)
	titleH, legendH := 64*px, vg.Length(min(len(entries), legendRows)*22+16)*px
	big := plot.New().Title.TextStyle
	big.Font.Size = vg.Points(15)
	small := big
	small.Font.Size = vg.Points(10.5)
	big.XAlign, small.XAlign = draw.XCenter, draw.XCenter
	mid := (dc.Min.X + dc.Max.X) / 2
	dc.FillText(big, vg.Point{X: mid, Y: dc.Max.Y - 28*px}, title)
	dc.FillText(small, vg.Point{X: mid, Y: dc.Max.Y - 54*px}, subtitle)

	panels := draw.Crop(dc, 0, 0, legendH, -titleH)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 8, PadTop: vg.Millimeter * 5,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 4}
	// Not plot.Align: it lines up the data areas by moving one panel's
	// title above the other's. Both panels share the x axis, so plain
	// tiles line up anyway.
	bw.Draw(tiles.At(panels, 0, 0))
	lat.Draw(tiles.At(panels, 1, 0))

	// The legend, in columns of legendRows entries, centred beneath.
	cols := (len(entries) + legendRows - 1) / legendRows
	longest := 0
	for _, e := range entries {
		longest = max(longest, len(e.label))
	}
	colW := min(vg.Length(PlotWidth)*px/vg.Length(max(cols, 1)), vg.Length(longest*8+70)*px)
	left := mid - colW*vg.Length(cols)/2
	for c := 0; c < cols; c++ {
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = vg.Points(11)
		l.ThumbnailWidth = vg.Points(30)
		l.Padding = 5 * px
		for _, e := range entries[c*legendRows : min(len(entries), (c+1)*legendRows)] {
			l.Add(e.label, e.thumbs...)
		}
		strip := draw.Crop(dc, 0, 0, 0, 0)
		strip.Rectangle = vg.Rectangle{Min: vg.Point{X: left + colW*vg.Length(c) + 20*px, Y: dc.Min.Y + 6*px},
			Max: vg.Point{X: left + colW*vg.Length(c+1), Y: dc.Min.Y + legendH}}
		l.Draw(strip)
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// describe is the plot's title and subtitle: what was measured, where,
// when, and what the bands mean.
func describe(results []Result) (string, string) {
	first := results[0].Meta
	what := func(m Meta) string {
		s := m.Op
		if m.DType != "" {
			s += " " + m.DType
		}
		if m.Redop != "" && m.Redop != "none" {
			s += " " + m.Redop
		}
		return s
	}
	title, ranks := what(first), first.Ranks
	hosts := map[string]bool{}
	date := first.Date
	runs := 0
	for _, r := range results {
		if what(r.Meta) != title {
			title = "collectives"
		}
		if r.Meta.Ranks != ranks {
			ranks = 0
		}
		if r.Meta.Host != "" {
			hosts[r.Meta.Host] = true
		}
		if r.Meta.Date != "" && (date == "" || r.Meta.Date < date) {
			date = r.Meta.Date
		}
		for _, row := range r.Rows {
			runs = max(runs, row.Runs)
		}
	}
	if ranks > 0 {
		title += fmt.Sprintf(", %d ranks", ranks)
	}
	var sub []string
	switch len(hosts) {
	case 0:
	case 1:
		h := "host " + first.Host
		if first.Host == "" {
			for k := range hosts {
				h = "host " + k
			}
		}
		if first.Cores > 0 {
			h += fmt.Sprintf(" (%d cores", first.Cores)
			if first.CPUModel != "" {
				h += ", " + first.CPUModel
			}
			h += ")"
		}
		sub = append(sub, h)
	default:
		sub = append(sub, fmt.Sprintf("%d hosts", len(hosts)))
	}
	if t, err := time.Parse(time.RFC3339, date); err == nil {
		sub = append(sub, t.UTC().Format("2006-01-02 15:04 MST"))
	}
	if runs > 1 {
		sub = append(sub, fmt.Sprintf("lines: median of up to %d runs, bands: fastest to slowest run", runs))
	} else {
		sub = append(sub, "no run-to-run spread recorded")
	}
	return title, strings.Join(sub, " · ")
}

// entry is one line's legend: its label and what it is drawn with.
type entry struct {
	label  string
	thumbs []plot.Thumbnailer
}

func panel(title, ylabel string, results []Result, labels []string, y func(Row) float64, spread func(Row) (float64, float64)) (*plot.Plot, []entry, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = sizeTicks{}, plainLogTicks{}
	p.Add(plotter.NewGrid())
	var entries []entry
	for i, res := range results {
		var xys, lo, hi plotter.XYs
		for _, r := range res.Rows {
			// Log axes cannot show 0 (a barrier's size, a busbw of 0).
			v := y(r)
			if r.Size <= 0 || v <= 0 {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(r.Size), Y: v})
			if a, b := spread(r); a > 0 && b > 0 && r.Runs > 1 {
				lo = append(lo, plotter.XY{X: float64(r.Size), Y: a})
				hi = append(hi, plotter.XY{X: float64(r.Size), Y: b})
			}
		}
		if len(xys) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		if len(lo) > 1 {
			ring := append(plotter.XYs{}, lo...)
			for j := len(hi) - 1; j >= 0; j-- {
				ring = append(ring, hi[j])
			}
			band, err := plotter.NewPolygon(ring)
			if err != nil {
				return nil, nil, fmt.Errorf("plot %q: %w", labels[i], err)
			}
			band.Color = color.NRGBA{c.R, c.G, c.B, 0x38}
			band.LineStyle.Width = 0
			p.Add(band)
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, fmt.Errorf("plot %q: %w", labels[i], err)
		}
		l.Color, s.Color = c, c
		l.Width = vg.Points(1.5)
		if d := i / len(palette) % 3; d > 0 {
			l.Dashes = []vg.Length{vg.Points(float64(2 + 2*d)), vg.Points(3)}
		}
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(2)
		p.Add(l, s)
		entries = append(entries, entry{labels[i], []plot.Thumbnailer{l, s}})
	}
	if len(entries) == 0 {
		return nil, nil, fmt.Errorf("%s: %w (no row with a positive size and value)", title, ErrNothingToPlot)
	}
	// A single point gives a log axis no range; widen it around the point.
	if p.X.Min == p.X.Max {
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
	if p.Y.Min == p.Y.Max {
		p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*2
	}
	return p, entries, nil
}

// sizeTicks marks every power of two on a log axis of bytes and labels
// every third (8, 64, 512, 4K, ...) in powers of 1024, as sizes are given
// on the command line.
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	first, last := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	for e := max(first, 0); e <= last && e < 63; e++ {
		t := plot.Tick{Value: math.Ldexp(1, e)}
		if e%3 == 0 {
			t.Label = sizeLabel(int64(1) << e)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func sizeLabel(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// plainLogTicks are plot.LogTicks labelled 1000000 rather than 1e+06.
type plainLogTicks struct{}

func (plainLogTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			// The decades below 1 come out of math.Pow a hair off
			// (0.0000999999999999999): 12 digits round that away.
			v, _ := strconv.ParseFloat(strconv.FormatFloat(t.Value, 'g', 12, 64), 64)
			ticks[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ticks
}
