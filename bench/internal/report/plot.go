package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

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

// Plot draws busbw (left) and time (right) against size, on log axes, one
// line per result labelled by labels[i], into a PNG at path.
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
	bw, err := panel("bus bandwidth", "busbw (GB/s)", results, labels, func(r Row) float64 { return r.BusBW })
	if err != nil {
		return err
	}
	lat, err := panel("time per call", "time (us)", results, labels, func(r Row) float64 { return r.TimeUS })
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

func panel(title, ylabel string, results []Result, labels []string, y func(Row) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = sizeTicks{}, plainLogTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*3, -vg.Millimeter*3
	lines := 0
	for i, res := range results {
		var xys plotter.XYs
		for _, r := range res.Rows {
			// Log axes cannot show 0 (a barrier's size, a busbw of 0).
			if v := y(r); r.Size > 0 && v > 0 {
				xys = append(xys, plotter.XY{X: float64(r.Size), Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plot %q: %w", labels[i], err)
		}
		c := palette[i%len(palette)]
		l.Color, s.Color = c, c
		l.Width = vg.Points(1.5)
		if d := i / len(palette) % 3; d > 0 {
			l.Dashes = []vg.Length{vg.Points(float64(2 + 2*d)), vg.Points(3)}
		}
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(2)
		p.Add(l, s)
		p.Legend.Add(labels[i], l, s)
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
