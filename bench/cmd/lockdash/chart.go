package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	faultColor = color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0x38}
	palette    = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	}
)

// series is one line of a panel.
type series struct {
	name   string
	pts    plotter.XYs
	dashed bool
}

// render draws the four panels, two by two, the faults shaded on each.
func render(path string, samples []sample, faults []fault, workers, keys int) error {
	x := func(s sample) float64 { return s.at.Seconds() }
	lat := []series{{name: "p50"}, {name: "p99"}}
	for _, s := range samples {
		for i, v := range []float64{s.p50, s.p99} {
			if !math.IsNaN(v) {
				lat[i].pts = append(lat[i].pts, plotter.XY{X: x(s), Y: v * 1000})
			}
		}
	}
	held := []series{{name: "held"}}
	for _, s := range samples {
		held[0].pts = append(held[0].pts, plotter.XY{X: x(s), Y: float64(s.held)})
	}
	panels := []*plot.Plot{
		panel("Acquire latency, granted (ms, log)", lat, faults, true),
		panel("Acquisitions/s by outcome", byName(samples, func(s sample) map[string]int64 { return s.outcomes }), faults, false),
		panel(fmt.Sprintf("Locks held (%d keys)", keys), held, faults, false),
		panel("Losses/s by cause; backend errors/s", append(byName(samples, func(s sample) map[string]int64 { return s.losses }),
			prefixed("error ", byName(samples, func(s sample) map[string]int64 { return s.errors }))...), faults, false),
	}
	img := vgimg.New(24*vg.Centimeter, 15*vg.Centimeter)
	dc := draw.New(img)
	title := fmt.Sprintf("distlock on Redis: %d clients, TTL %v; shaded: SIGSTOP %v-%vs, restart without data at %vs",
		workers, ttl, faults[0].start.Seconds(), faults[0].end.Seconds(), faults[1].start.Seconds())
	top := draw.Crop(dc, 0, 0, 0, -0.6*vg.Centimeter)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, vg.Points(11)), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter},
		vg.Point{X: dc.Center().X, Y: dc.Max.Y - 0.45*vg.Centimeter}, title)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4}
	canvases := plot.Align([][]*plot.Plot{{panels[0], panels[1]}, {panels[2], panels[3]}}, tiles, top)
	for i, p := range panels {
		p.Draw(canvases[i/2][i%2])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// byName makes one series per name that any sample has, zeros filled in.
func byName(samples []sample, get func(sample) map[string]int64) []series {
	var names []string
	for _, s := range samples {
		for n := range get(s) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	out := make([]series, len(names))
	for i, n := range names {
		out[i].name = n
		for _, s := range samples {
			out[i].pts = append(out[i].pts, plotter.XY{X: s.at.Seconds(), Y: float64(get(s)[n])})
		}
	}
	return out
}

// prefixed names ss with p and dashes them: a second kind of figure in a panel.
func prefixed(p string, ss []series) []series {
	for i := range ss {
		ss[i].name = p + ss[i].name
		ss[i].dashed = true
	}
	return ss
}

// panel is a line chart of ss over time, the faults shaded.
func panel(title string, ss []series, faults []fault, logY bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "s"
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, pt := range s.pts {
			lo, hi = min(lo, pt.Y), max(hi, pt.Y)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		lo, hi = lo/2, hi*2
	} else {
		lo, hi = 0, max(1, hi*1.15)
	}
	p.Y.Min, p.Y.Max = lo, hi
	for _, f := range faults {
		end := f.end
		if end == 0 {
			end = f.start + f.start/100 + 1e8 // an instant: a thin band
		}
		band, err := plotter.NewPolygon(plotter.XYs{{X: f.start.Seconds(), Y: lo}, {X: end.Seconds(), Y: lo},
			{X: end.Seconds(), Y: hi}, {X: f.start.Seconds(), Y: hi}})
		if err == nil {
			band.Color = faultColor
			band.LineStyle.Width = 0
			p.Add(band)
		}
	}
	for i, s := range ss {
		if len(s.pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.pts)
		if err != nil {
			continue
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.2)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return p
}
