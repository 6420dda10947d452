// Package plot draws the pictures of a training run with gonum.org/v1/plot:
// held-out loss against training FLOPs and against wall-clock time for
// several runs, the routing of a text (tokens × layers, as in the routing
// analysis figure of Raposo et al. 2024), and the histogram of router
// weights. Each function returns a *plot.Plot of gonum; Write renders it as
// PNG or SVG.
package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/modref/modref/internal/atomicfile"
	"github.com/modref/modref/mod/train"
)

// Run is one training run's metrics under a name. Runs with the same Group
// share a colour and one legend entry (several seeds of one variant).
type Run struct {
	Name, Group string
	Metrics     *train.Metrics
}

// Axis chooses the horizontal axis of a loss plot.
type Axis int

// The horizontal axes of Loss.
const (
	// FLOPs is the training compute (train.Eval.FLOPs).
	FLOPs Axis = iota
	// Seconds is the wall-clock training time (train.Eval.WallSeconds).
	Seconds
)

// newPlot returns a plot with a title.
func newPlot(title string) *gplot.Plot {
	p := gplot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	return p
}

// palette holds the colours of the groups, in order of first appearance.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// Loss plots every run's held-out loss against the chosen axis, a line
// with a point per evaluation.
func Loss(title string, runs []Run, x Axis) (*gplot.Plot, error) {
	p := newPlot(title)
	p.Y.Label.Text = "held-out loss (nats per byte)"
	switch x {
	case FLOPs:
		p.X.Label.Text = "training FLOPs (3 × forward, mod's accounting)"
	case Seconds:
		p.X.Label.Text = "wall-clock training time (s)"
	default:
		return nil, fmt.Errorf("plot: unknown axis %d", x)
	}
	p.Add(plotter.NewGrid())
	groups := map[string]int{}
	for _, r := range runs {
		g := r.Group
		if g == "" {
			g = r.Name
		}
		ci, seen := groups[g]
		if !seen {
			ci = len(groups)
			groups[g] = ci
		}
		pts := make(plotter.XYs, len(r.Metrics.Evals))
		for i, e := range r.Metrics.Evals {
			pts[i].X, pts[i].Y = e.FLOPs, e.Loss
			if x == Seconds {
				pts[i].X = e.WallSeconds
			}
		}
		if len(pts) == 0 {
			return nil, fmt.Errorf("plot: run %q has no evaluations", r.Name)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("plot: run %q: %w", r.Name, err)
		}
		c := palette[ci%len(palette)]
		line.Color, points.Color = c, c
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(1.5)
		p.Add(line, points)
		if !seen {
			p.Legend.Add(g, line)
		}
	}
	p.Legend.Top = true
	return p, nil
}

// routingGrid is a tokens × layers grid of 0 (skipped) and 1 (processed).
type routingGrid struct{ r *train.Routing }

func (g routingGrid) Dims() (c, r int) { return len(g.r.Text), len(g.r.Layers) }
func (g routingGrid) X(c int) float64  { return float64(c) }
func (g routingGrid) Y(r int) float64  { return float64(r) }
func (g routingGrid) Z(c, r int) float64 {
	if g.r.Layers[r].Processed[c] {
		return 1
	}
	return 0
}

// twoColours is the heat map's palette: skipped, processed.
type twoColours []color.Color

func (t twoColours) Colors() []color.Color { return t }

// Routing draws which bytes of a text went through each layer's block:
// one column per byte, labelled with the byte (a space as ·, a newline as
// \n), one row per layer, dark where the block processed the byte.
func Routing(title string, r *train.Routing) (*gplot.Plot, error) {
	if len(r.Text) == 0 || len(r.Layers) == 0 {
		return nil, fmt.Errorf("plot: routing of %d bytes and %d layers, want at least one of each", len(r.Text), len(r.Layers))
	}
	p := newPlot(title)
	hm := plotter.NewHeatMap(routingGrid{r}, twoColours{color.RGBA{R: 0xf4, G: 0xf4, B: 0xf4, A: 0xff}, color.RGBA{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff}})
	hm.Min, hm.Max = 0, 1
	p.Add(hm)
	var xt, yt gplot.ConstantTicks
	for i, c := range r.Text {
		xt = append(xt, gplot.Tick{Value: float64(i), Label: byteLabel(c)})
	}
	for l, lr := range r.Layers {
		kind := "dense"
		if lr.Routed {
			n := 0
			for _, on := range lr.Processed {
				if on {
					n++
				}
			}
			kind = fmt.Sprintf("routed, %d/%d", n, len(lr.Processed))
		}
		yt = append(yt, gplot.Tick{Value: float64(l), Label: fmt.Sprintf("layer %d (%s)", l, kind)})
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = xt, yt
	p.X.Label.Text = "byte of the text"
	p.X.Tick.Label.Font.Size = vg.Points(9)
	p.X.Min, p.X.Max = -0.5, float64(len(r.Text))-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(len(r.Layers))-0.5
	p.Y.Tick.Length, p.X.Tick.Length = 0, 0
	return p, nil
}

// byteLabel is how a byte is written on the routing plot's axis.
func byteLabel(c byte) string {
	switch {
	case c == ' ':
		return "·"
	case c == '\n':
		return `\n`
	case c == '\t':
		return `\t`
	case c < 0x20 || c >= 0x7f:
		return fmt.Sprintf("%02x", c)
	}
	return string(rune(c))
}

// RouterWeights draws, for each routed layer, the histogram of the router
// weights r of a text's bytes (bins bins over the common range), as
// outlined bars of the layer's colour.
func RouterWeights(title string, r *train.Routing, bins int) (*gplot.Plot, error) {
	if bins < 1 {
		return nil, fmt.Errorf("plot: %d bins, want >= 1", bins)
	}
	p := newPlot(title)
	p.X.Label.Text = "router weight r"
	p.Y.Label.Text = "bytes"
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, lr := range r.Layers {
		for _, w := range lr.RouterLogits {
			lo, hi = math.Min(lo, float64(w)), math.Max(hi, float64(w))
		}
	}
	if lo > hi {
		return nil, fmt.Errorf("plot: the model has no routed layer")
	}
	ci := 0
	for l, lr := range r.Layers {
		if !lr.Routed {
			continue
		}
		vs := make(plotter.Values, len(lr.RouterLogits))
		for i, w := range lr.RouterLogits {
			vs[i] = float64(w)
		}
		h, err := plotter.NewHistogram(binned{vs, lo, hi}, bins)
		if err != nil {
			return nil, fmt.Errorf("plot: layer %d: %w", l, err)
		}
		c := palette[ci%len(palette)]
		ci++
		h.FillColor = nil
		h.LineStyle.Color = c
		h.LineStyle.Width = vg.Points(1.5)
		p.Add(h)
		p.Legend.Add("layer "+strconv.Itoa(l), h)
	}
	p.Legend.Top = true
	return p, nil
}

// binned is a Valuer as an XYer of unit weights whose range is [lo, hi]
// (two zero-weight points at the ends), so that every layer's histogram
// has the same bins.
type binned struct {
	vs     plotter.Values
	lo, hi float64
}

func (b binned) Len() int { return len(b.vs) + 2 }
func (b binned) XY(i int) (float64, float64) {
	switch i {
	case len(b.vs):
		return b.lo, 0
	case len(b.vs) + 1:
		return b.hi, 0
	}
	return b.vs[i], 1
}

// Write renders p as "png" or "svg" of the given size to w.
func Write(w io.Writer, p *gplot.Plot, format string, width, height vg.Length) error {
	if format != "png" && format != "svg" {
		return fmt.Errorf("plot: format %q, want png or svg", format)
	}
	wt, err := p.WriterTo(width, height, format)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("plot: writing %s: %w", format, err)
	}
	return nil
}

// Save renders p to path, as PNG or SVG by the path's extension, writing a
// temporary file beside it and renaming it into place (internal/atomicfile:
// only over a regular file).
func Save(path string, p *gplot.Plot, width, height vg.Length) error {
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	var buf bytes.Buffer
	if err := Write(&buf, p, format, width, height); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
