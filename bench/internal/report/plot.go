package report

import (
	"errors"
	"fmt"
	"image/color"
	"os"

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
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
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
