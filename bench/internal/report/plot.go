package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The PNG's size in pixels: two panels side by side.
const (
	PlotWidth  = 1400
	PlotHeight = 560
	plotDPI    = 96
)

// ErrNothingToPlot reports results without a single positive value to draw
// on log axes.
var ErrNothingToPlot = errors.New("nothing to plot")

// palette is distinguishable in colour and, printed grey, by dash pattern.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
	{0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// Plot draws busbw (left) and time (right) against size, on log axes,
// into a PNG at path. Results with the same label are repeats of one
// setup: they draw as one line through the medians, in a shaded band from
// the minimum to the maximum, so that run-to-run spread shows and a noisy
// minute is not taken for real behaviour. The title says what every
// result shares (collective, type, ranks) and where and when they ran;
// the legend, only what sets them apart.
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
	groups := group(results, labels)
	title := caption(results)
	// Bandwidth grows with size, time too: the legend goes where each
	// panel's data is not, bottom right and top left.
	bw, err := panel("bus bandwidth, "+title, "busbw (GB/s)", groups, false, func(r Row) float64 { return r.BusBW })
	if err != nil {
		return err
	}
	lat, err := panel("time per call, "+title, "time (µs)", groups, true, func(r Row) float64 { return r.TimeUS })
	if err != nil {
		return err
	}
	img := vgimg.NewWith(vgimg.UseWH(vg.Inch*PlotWidth/plotDPI, vg.Inch*PlotHeight/plotDPI), vgimg.UseDPI(plotDPI))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	plots := [][]*plot.Plot{{bw, lat}}
	canvases := plot.Align(plots, tiles, dc)
	bw.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
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

// series is the runs of one setup, drawn as one line and band.
type series struct {
	label string
	runs  []Result
}

// group gathers results by label, in order of first appearance.
func group(results []Result, labels []string) []series {
	var out []series
	at := map[string]int{}
	for i, r := range results {
		k, ok := at[labels[i]]
		if !ok {
			k = len(out)
			at[labels[i]] = k
			out = append(out, series{label: labels[i]})
		}
		out[k].runs = append(out[k].runs, r)
	}
	for i := range out {
		if n := len(out[i].runs); n > 1 {
			out[i].label += fmt.Sprintf(" (median of %d runs, band min–max)", n)
		}
	}
	return out
}

// caption is what the results share, and where and when they ran:
// "allreduce float32, 4 ranks; host vm, 2026-11-25".
func caption(results []Result) string {
	same := func(f func(Meta) string) string {
		v := f(results[0].Meta)
		for _, r := range results[1:] {
			if f(r.Meta) != v {
				return ""
			}
		}
		return v
	}
	var parts []string
	for _, f := range []func(Meta) string{
		func(m Meta) string { return m.Op },
		func(m Meta) string { return m.DType },
		func(m Meta) string {
			if m.Ranks == 0 {
				return ""
			}
			return strconv.Itoa(m.Ranks) + " ranks"
		},
	} {
		if v := same(f); v != "" {
			parts = append(parts, v)
		}
	}
	where := []string{}
	if h := same(func(m Meta) string { return m.Host }); h != "" {
		where = append(where, "host "+h)
	}
	first, last := "", ""
	for _, r := range results {
		if d := r.Meta.Date; len(d) >= 10 {
			if first == "" || d[:10] < first {
				first = d[:10]
			}
			if d[:10] > last {
				last = d[:10]
			}
		}
	}
	if first != "" {
		if last != first {
			first += " to " + last
		}
		where = append(where, first)
	}
	s := strings.Join(parts, " ")
	if len(where) > 0 {
		s += "; " + strings.Join(where, ", ")
	}
	return s
}

func panel(title, ylabel string, groups []series, topLeft bool, y func(Row) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = sizeTicks{}, plainLogTicks{}
	p.Add(plotter.NewGrid())
	// Entries are spaced so that their text never touches.
	p.Legend.Top, p.Legend.Left = topLeft, topLeft
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*3, -vg.Millimeter*3
	if !topLeft {
		p.Legend.XOffs, p.Legend.YOffs = -vg.Millimeter*3, vg.Millimeter*3
	}
	p.Legend.Padding = vg.Points(3)
	lines := 0
	for i, g := range groups {
		med, lo, hi := spread(g.runs, y)
		if len(med) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		if len(g.runs) > 1 {
			band, err := plotter.NewPolygon(append(lo, reversed(hi)...))
			if err != nil {
				return nil, fmt.Errorf("plot %q: %w", g.label, err)
			}
			band.Color = color.NRGBA{c.R, c.G, c.B, 0x40}
			band.LineStyle.Width = 0
			p.Add(band)
		}
		l, s, err := plotter.NewLinePoints(med)
		if err != nil {
			return nil, fmt.Errorf("plot %q: %w", g.label, err)
		}
		l.Color, s.Color = c, c
		l.Width = vg.Points(1.5)
		if d := i / len(palette) % 3; d > 0 {
			l.Dashes = []vg.Length{vg.Points(float64(2 + 2*d)), vg.Points(3)}
		}
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(2)
		p.Add(l, s)
		p.Legend.Add(g.label, l, s)
		lines++
	}
	if lines == 0 {
		return nil, fmt.Errorf("%s: %w (no row with a positive size and value)", title, ErrNothingToPlot)
	}
	// A single point gives a log axis no range; widen it around the point.
	if p.X.Min == p.X.Max {
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
	if p.Y.Min == p.Y.Max {
		p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*2
	}
	return p, nil
}

// spread is, for each size the runs measured, the median, minimum and
// maximum of y over the runs. Log axes cannot show 0 (a barrier's size,
// a busbw of 0): such points are left out.
func spread(runs []Result, y func(Row) float64) (med, lo, hi plotter.XYs) {
	by := map[int64][]float64{}
	var sizes []int64
	for _, res := range runs {
		for _, r := range res.Rows {
			v := y(r)
			if r.Size <= 0 || v <= 0 {
				continue
			}
			if _, ok := by[r.Size]; !ok {
				sizes = append(sizes, r.Size)
			}
			by[r.Size] = append(by[r.Size], v)
		}
	}
	slices.Sort(sizes)
	for _, sz := range sizes {
		vs := by[sz]
		slices.Sort(vs)
		m := vs[len(vs)/2]
		if len(vs)%2 == 0 {
			m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
		}
		x := float64(sz)
		med = append(med, plotter.XY{X: x, Y: m})
		lo = append(lo, plotter.XY{X: x, Y: vs[0]})
		hi = append(hi, plotter.XY{X: x, Y: vs[len(vs)-1]})
	}
	return med, lo, hi
}

func reversed(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(xys))
	for i, p := range xys {
		out[len(xys)-1-i] = p
	}
	return out
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
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
	}
	return ticks
}
