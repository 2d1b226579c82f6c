package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// barGroup is one labelled group of horizontal bars.
type barGroup struct {
	label string
	bars  []bar
}

type bar struct {
	label string
	value float64
}

// Chart layout, in pixels.
const (
	chartWidth = 1200
	barHeight  = 13
	barGap     = 2
	groupGap   = 12
	legendTop  = 40
	legendLine = 20
	plotTop    = 80
	valueRoom  = 110 // right of the longest bar, for its value
	margin     = 16
)

// seriesColors colours bars by the system (or percentile) their label
// starts with, so a system has the same colour in every group; the legend
// names these series.
var seriesColors = []struct {
	name  string
	color color.RGBA
}{
	// before the systems they start with: scenario 13's delayed messages
	{sysRedisdelay + " " + costDelayed, color.RGBA{0x9e, 0xca, 0xe1, 0xff}},
	{sysAsynq + " " + costDelayed, color.RGBA{0xc7, 0xe9, 0xc0, 0xff}},
	{sysRedisdelay, color.RGBA{0x1f, 0x6f, 0xc5, 0xff}},
	{sysRedisstream, color.RGBA{0xe8, 0x7d, 0x1e, 0xff}},
	{sysGoChannel, color.RGBA{0x8c, 0x8c, 0x8c, 0xff}},
	{sysAsynqFast, color.RGBA{0x2c, 0xa0, 0x2c, 0xff}},
	{sysAsynq, color.RGBA{0x98, 0xdf, 0x8a, 0xff}},
	{"asynq", color.RGBA{0x1b, 0x5e, 0x20, 0xff}},
	{sysRaw, color.RGBA{0x94, 0x67, 0xbd, 0xff}},
	{"p50", color.RGBA{0x1f, 0x6f, 0xc5, 0xff}},
	{"p99.9", color.RGBA{0xd6, 0x27, 0x28, 0xff}},
	{"p99", color.RGBA{0xe8, 0x7d, 0x1e, 0xff}},
	{"max", color.RGBA{0x59, 0x59, 0x59, 0xff}},
}

var otherColors = []color.RGBA{{0x17, 0xbe, 0xcf, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x8c, 0x56, 0x4b, 0xff}}

// series returns the legend name and colour of a bar label; labels of no
// known series get a colour of their own, other chooses it.
func series(label string, other int) (string, color.RGBA) {
	for _, s := range seriesColors {
		if strings.HasPrefix(label, s.name) {
			return s.name, s.color
		}
	}
	return label, otherColors[other%len(otherColors)]
}

// drawChart writes a PNG of horizontal grouped bars on a logarithmic axis.
// Bar labels are the legend; values at or below zero get no bar but keep
// their printed value.
func drawChart(path, title string, groups []barGroup) error {
	return drawBars(path, title, groups, logAxis(groups))
}

// drawLinearChart is drawChart on a linear axis from zero, for figures of
// one order of magnitude whose ratios matter (rates against backlog size).
func drawLinearChart(path, title string, groups []barGroup) error {
	return drawBars(path, title, groups, linearAxis(groups))
}

// axis places values along the bars: pos maps a value to 0..1 (negative:
// no bar), ticks are the values of the grid lines.
type axis struct {
	pos   func(v float64) float64
	ticks []float64
}

// logAxis spans the decades of the positive values.
func logAxis(groups []barGroup) axis {
	lo, hi := logRange(groups)
	a := axis{pos: func(v float64) float64 { return (math.Log10(v) - lo) / (hi - lo) }}
	for e := lo; e <= hi; e++ {
		a.ticks = append(a.ticks, math.Pow(10, e))
	}
	return a
}

// linearAxis runs from zero to the largest value rounded up to a step of
// 1, 2 or 5 times a power of ten, with about five grid lines.
func linearAxis(groups []barGroup) axis {
	top := 0.0
	for _, g := range groups {
		for _, b := range g.bars {
			top = max(top, b.value)
		}
	}
	if top <= 0 {
		top = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(top/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if top/(step*m) <= 6 {
			step *= m
			break
		}
	}
	hi := math.Ceil(top/step) * step
	a := axis{pos: func(v float64) float64 { return v / hi }}
	for t := 0.0; t <= hi+step/2; t += step {
		a.ticks = append(a.ticks, t)
	}
	return a
}

func drawBars(path, title string, groups []barGroup, ax axis) error {
	face, err := chartFace()
	if err != nil {
		return err
	}
	labelWidth := 0
	var legend []string
	colors := map[string]color.RGBA{}  // by legend name
	colorOf := map[string]color.RGBA{} // by bar label
	for _, g := range groups {
		labelWidth = max(labelWidth, font.MeasureString(face, g.label).Ceil())
		for _, b := range g.bars {
			name, c := series(b.label, len(colors))
			if _, ok := colors[name]; !ok {
				colors[name] = c
				legend = append(legend, name)
			}
			colorOf[b.label] = colors[name]
		}
	}
	legendRows, x := 1, margin
	for _, l := range legend {
		w := 16 + font.MeasureString(face, l).Ceil() + 18
		if x+w > chartWidth-margin {
			legendRows, x = legendRows+1, margin
		}
		x += w
	}
	top := plotTop + (legendRows-1)*legendLine
	height := top + margin + 20
	for _, g := range groups {
		height += max(len(g.bars), 1)*(barHeight+barGap) + groupGap
	}
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text := func(x, y int, c color.Color, s string) {
		d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
		d.DrawString(s)
	}
	fill := func(x0, y0, x1, y1 int, c color.Color) {
		draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(c), image.Point{}, draw.Src)
	}

	text(margin, 24, color.Black, title)
	x, ly := margin, legendTop
	for _, l := range legend {
		w := 16 + font.MeasureString(face, l).Ceil() + 18
		if x+w > chartWidth-margin {
			x, ly = margin, ly+legendLine
		}
		fill(x, ly, x+12, ly+12, colors[l])
		text(x+16, ly+11, color.Black, l)
		x += w
	}

	left := margin + labelWidth + 12
	right := chartWidth - valueRoom
	scale := func(v float64) int {
		return left + int(float64(right-left)*ax.pos(v))
	}
	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	for _, t := range ax.ticks {
		gx := scale(t)
		fill(gx, top-4, gx+1, height-margin-16, grid)
		label := formatNumber(t)
		text(gx-font.MeasureString(face, label).Ceil()/2, height-margin, color.Gray{0x55}, label)
	}

	y := top
	for _, g := range groups {
		groupHeight := max(len(g.bars), 1) * (barHeight + barGap)
		text(margin, y+groupHeight/2+5, color.Black, g.label)
		for _, b := range g.bars {
			end := left
			if b.value > 0 {
				end = max(scale(b.value), left+1)
				fill(left, y, end, y+barHeight, colorOf[b.label])
			}
			text(end+4, y+barHeight-2, color.Gray{0x33}, formatNumber(b.value))
			y += barHeight + barGap
		}
		y += groupGap
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// logRange returns the decades (log10) spanning the positive values.
func logRange(groups []barGroup) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, g := range groups {
		for _, b := range g.bars {
			if b.value > 0 {
				lo = min(lo, math.Floor(math.Log10(b.value)))
				hi = max(hi, math.Ceil(math.Log10(b.value)))
			}
		}
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

func chartFace() (font.Face, error) {
	f, err := opentype.Parse(goregular.TTF)
	if err != nil {
		return nil, fmt.Errorf("parse chart font: %w", err)
	}
	return opentype.NewFace(f, &opentype.FaceOptions{Size: 12, DPI: 72, Hinting: font.HintingFull})
}
