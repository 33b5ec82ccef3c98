package harness

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var roleColors = map[Role]color.Color{
	Ours:  color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	Floor: color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff},
	Peer:  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// WriteChart draws one panel per figure, one bar per contestant grouped by
// backend, ours first in each group: contended handoffs per second and
// uncontended acquire+release p50 on the first row; distinct-keys operations
// per second at the wide goroutine count and the server requests per second
// that keep the scale scenario's locks on the second, when the run has them.
// Each is on a log scale (the figures span several orders of magnitude),
// medians over the repeats.
func (r *Results) WriteChart(path string) error {
	type spec struct {
		m     Metric
		title string
	}
	specs := [][]spec{{
		{Handoffs, "Contended handoffs/s (higher is better)"},
		{UncP50, "Uncontended acquire+release p50, µs (lower is better)"},
	}}
	cfg := r.Config
	var second []spec
	if cfg.WideGoroutines > 0 && cfg.runs(Distinct) {
		second = append(second, spec{DistinctWide, fmt.Sprintf("Distinct keys, %d goroutines, ops/s (higher is better)", cfg.WideGoroutines)})
	}
	if cfg.ScaleLocks > 0 && cfg.runs(Scale) {
		second = append(second, spec{ScaleReqs, fmt.Sprintf("Server requests/s to keep %s locks (lower is better)", short(float64(cfg.ScaleLocks)))})
	}
	if len(second) > 0 {
		for len(second) < 2 {
			second = append(second, spec{}) // an empty panel keeps the grid
		}
		specs = append(specs, second)
	}
	plots := make([][]*plot.Plot, len(specs))
	rows := 4
	for i, line := range specs {
		most := 0
		for _, sp := range line {
			p, n, err := r.panel(sp.m, sp.title)
			if err != nil {
				return err
			}
			plots[i] = append(plots[i], p)
			most = max(most, n)
		}
		rows = max(rows, most)
	}
	rowHeight := vg.Length(rows)*0.75*vg.Centimeter + 3*vg.Centimeter
	img := vgimg.New(30*vg.Centimeter, vg.Length(len(specs))*rowHeight)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(specs), Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
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

// panel is a horizontal bar chart of m, one row per contestant with a figure,
// and its number of rows. A zero m (no Key) is an empty panel.
func (r *Results) panel(m Metric, title string) (*plot.Plot, int, error) {
	type row struct {
		label string
		role  Role
		v     float64
	}
	var rows []row
	for _, group := range r.Groups() {
		for _, c := range group {
			s := Summarise(r.Get(c, m))
			if m.Key == "" || na(c, m) || s.N == 0 || s.Median <= 0 {
				continue
			}
			rows = append(rows, row{c.Backend + " · " + c.Label(), c.Role, s.Median})
		}
	}
	p := plot.New()
	p.Title.Text = title
	if len(rows) == 0 {
		p.HideAxes()
		return p, 0, nil // a run of other scenarios only: an empty panel
	}
	var names []string
	// The first row is drawn at the top: plotter rows count from the bottom.
	for i := len(rows) - 1; i >= 0; i-- {
		names = append(names, rows[i].label)
	}
	lo := math.Inf(1)
	for _, rw := range rows {
		lo = math.Min(lo, rw.v)
	}
	// Bars are drawn in decades above base, a power of ten at or below the
	// smallest figure: a log scale whose bars start at base, not at 0.
	base := math.Pow(10, math.Floor(math.Log10(lo)))
	p.X.Tick.Marker = logTicks{base}
	for _, role := range []Role{Ours, Floor, Peer} {
		vals := make(plotter.Values, len(rows))
		any := false
		for i, rw := range rows {
			vals[len(rows)-1-i] = 0 // zero-width bar: not this role
			if rw.role == role {
				vals[len(rows)-1-i] = math.Log10(rw.v / base)
				any = true
			}
		}
		if !any {
			continue
		}
		bars, err := plotter.NewBarChart(vals, 0.6*vg.Centimeter)
		if err != nil {
			return nil, 0, err
		}
		bars.Horizontal = true
		bars.Color = roleColors[role]
		bars.LineStyle.Width = 0
		p.Add(bars)
		p.Legend.Add(role.String(), bars)
	}
	p.NominalY(names...)
	p.X.Min = 0
	// A decade of room on the right keeps the legend clear of the bars.
	hi := 0.0
	for _, rw := range rows {
		hi = math.Max(hi, math.Log10(rw.v/base))
	}
	p.X.Max = math.Ceil(hi) + 1
	p.Legend.Top = true
	return p, len(rows), nil
}

// logTicks labels the axis of decades above base with the figures they stand
// for: a tick at every decade, unlabelled ones at 2× and 5×.
type logTicks struct{ base float64 }

func (l logTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(min); e <= math.Ceil(max); e++ {
		for _, f := range []float64{1, 2, 5} {
			t := e + math.Log10(f)
			if t < min || t > max {
				continue
			}
			tick := plot.Tick{Value: t}
			if f == 1 {
				tick.Label = short(l.base * math.Pow(10, e))
			}
			ticks = append(ticks, tick)
		}
	}
	return ticks
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}
