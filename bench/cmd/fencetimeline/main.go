// Command fencetimeline draws the picture of docs/FENCING.md from a real run
// of the paused-holder test: it reads the test's -v log, whose timeline lines
// read "  318.8ms  A's 200ms lease has run out ...", and draws one row per
// event, in order, with its real time, in the column of the one who acted
// (holder A, the operator, holder B), A's frozen stretch shaded, admitted
// writes green and refused ones red.
//
//	go test -count=1 -v -run TestPausedHolderProcessOnFileIsRefusedByTheHandler ../fence/ |
//		go run ./cmd/fencetimeline -o ../docs/fencing-timeline.png     (from bench/)
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// event is one timeline line of the log.
type event struct {
	ms   float64
	text string
}

var line = regexp.MustCompile(`_test\.go:\d+:\s+([0-9.]+)ms  (.*)$`)

func main() {
	out := flag.String("o", "fencing-timeline.png", "the PNG to write")
	title := flag.String("title", "file backend, resource behind fence.Handler", "what the run was")
	flag.Parse()
	events, err := parse(os.Stdin)
	if err == nil {
		err = render(*out, *title, events)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencetimeline:", err)
		os.Exit(1)
	}
}

func parse(r io.Reader) ([]event, error) {
	var events []event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ms, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil, err
		}
		events = append(events, event{ms, m[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, errors.New("no timeline lines on stdin (run the test with -v)")
	}
	return events, nil
}

// column is who acted: 0 holder A, 1 the operator, 2 holder B.
func column(text string) int {
	switch {
	case strings.HasPrefix(text, "holder B"), strings.HasPrefix(text, "B's"):
		return 2
	case strings.HasPrefix(text, "operator"):
		return 1
	}
	return 0
}

var (
	red   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	green = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	grey  = color.RGBA{R: 0x77, G: 0x77, B: 0x77, A: 0xff}
	frost = color.NRGBA{R: 0x9e, G: 0xc9, B: 0xe8, A: 0x70}
)

// outcome colours a write's line: red refused, green admitted, grey otherwise.
func outcome(text string) color.Color {
	switch {
	case strings.Contains(text, "write") && (strings.Contains(text, "409") || strings.Contains(text, "stale") || strings.Contains(text, "ErrStale")):
		return red
	case strings.Contains(text, "write") && (strings.Contains(text, ": 200") || strings.Contains(text, "<nil>")):
		return green
	}
	return grey
}

func render(path, title string, events []event) error {
	const (
		width  = 26 * vg.Centimeter
		rowH   = 1.4 * vg.Centimeter
		top    = 2.4 * vg.Centimeter
		timeW  = 2.4 * vg.Centimeter
		margin = 0.5 * vg.Centimeter
	)
	height := top + vg.Length(len(events))*rowH + margin
	img := vgimg.New(width, height)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	face := func(size float64) font.Font { return font.From(plot.DefaultFont, vg.Points(size)) }
	text := func(x, y vg.Length, size float64, c color.Color, align draw.XAlignment, s string) {
		dc.FillText(draw.TextStyle{Color: c, Font: face(size), Handler: plot.DefaultTextHandler, XAlign: align, YAlign: draw.YCenter},
			vg.Point{X: x, Y: y}, s)
	}
	colW := (width - timeW - 2*margin) / 3
	// Each column's lifeline runs near its left edge, its events' text to the right.
	colX := func(c int) vg.Length { return margin + timeW + colW*vg.Length(c) + 0.4*vg.Centimeter }
	rowY := func(i int) vg.Length { return height - top - rowH*vg.Length(i) - rowH/2 }

	text(width/2, height-0.6*vg.Centimeter, 12, color.Black, draw.XCenter, "Kleppmann's paused holder, fenced: "+title)
	for c, name := range []string{"holder A", "operator", "holder B"} {
		text(colX(c), height-1.6*vg.Centimeter, 11, color.Black, draw.XLeft, name)
	}
	text(margin, height-1.6*vg.Centimeter, 11, color.Black, draw.XLeft, "time")

	// A's frozen stretch, between its SIGSTOP and its SIGCONT rows.
	from, to := -1, -1
	for i, e := range events {
		switch {
		case strings.Contains(e.text, "SIGSTOP"):
			from = i
		case strings.Contains(e.text, "SIGCONT"):
			to = i
		}
	}
	if from >= 0 && to > from {
		dc.SetColor(frost)
		x := colX(0) - 0.2*vg.Centimeter
		var p vg.Path
		p.Move(vg.Point{X: x, Y: rowY(from)})
		p.Line(vg.Point{X: x + 0.4*vg.Centimeter, Y: rowY(from)})
		p.Line(vg.Point{X: x + 0.4*vg.Centimeter, Y: rowY(to)})
		p.Line(vg.Point{X: x, Y: rowY(to)})
		p.Close()
		dc.Fill(p)
	}
	// Lifelines.
	for c := range 3 {
		dc.StrokeLine2(draw.LineStyle{Color: grey, Width: vg.Points(0.5), Dashes: []vg.Length{vg.Points(3), vg.Points(3)}},
			colX(c), rowY(0)+rowH/2, colX(c), rowY(len(events)-1)-rowH/2)
	}
	for i, e := range events {
		y := rowY(i)
		text(margin, y, 10, color.Black, draw.XLeft, fmt.Sprintf("%.1f ms", e.ms))
		c := column(e.text)
		col := outcome(e.text)
		dc.SetColor(col)
		var dot vg.Path
		r := 0.12 * vg.Centimeter
		dot.Move(vg.Point{X: colX(c) + r, Y: y})
		dot.Arc(vg.Point{X: colX(c), Y: y}, r, 0, 2*math.Pi)
		dot.Close()
		dc.Fill(dot)
		if col == grey {
			col = color.Black
		}
		lines := wrap(e.text, 46)
		for j, l := range lines {
			ly := y + (vg.Length(len(lines)-1)/2-vg.Length(j))*0.38*vg.Centimeter
			text(colX(c)+0.35*vg.Centimeter, ly, 9, col, draw.XLeft, l)
		}
	}
	return writePNG(path, img)
}

// wrap breaks s into lines of at most n bytes at spaces.
func wrap(s string, n int) []string {
	var lines []string
	cur := ""
	for _, w := range strings.Fields(s) {
		if cur != "" && len(cur)+1+len(w) > n {
			lines = append(lines, cur)
			cur = w
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	return append(lines, cur)
}

func writePNG(path string, img *vgimg.Canvas) error {
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
