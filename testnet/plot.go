package testnet

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// plotColors are the curves' colours, one per variant in order.
var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// WritePlot draws the runs' validation loss against wall time as an SVG: one polyline per
// run (a variant's rounds share its colour, later rounds dashed), axes with ticks, a
// legend, and the title. The y axis spans the losses after the first evaluation (the
// untrained model's loss would flatten everything else); points above it are clipped.
func WritePlot(w io.Writer, title string, runs []Trial, budgetS float64) error {
	const W, H, left, right, top, bottom = 760.0, 460.0, 64.0, 170.0, 36.0, 48.0
	pw, ph := W-left-right, H-top-bottom
	lo, hi := plotRange(runs)
	x := func(t float64) float64 { return left + pw*t/budgetS }
	y := func(l float64) float64 { return top + ph*(hi-l)/(hi-lo) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%g" y="20" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&b, `<clipPath id="plot"><rect x="%g" y="%g" width="%g" height="%g"/></clipPath>`+"\n", left, top, pw, ph)
	for _, t := range ticks(0, budgetS, 6) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/><text x="%.1f" y="%g" text-anchor="middle">%g</text>`+"\n",
			x(t), top, x(t), top+ph, x(t), top+ph+16, t)
	}
	for _, l := range ticks(lo, hi, 6) {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%.2f</text>`+"\n",
			left, y(l), left+pw, y(l), left-6, y(l)+4, l)
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="black"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">wall time since submit (s)</text>`+"\n", left+pw/2, H-10)
	fmt.Fprintf(&b, `<text transform="translate(16 %g) rotate(-90)" text-anchor="middle">validation loss</text>`+"\n", top+ph/2)
	colour, legend := map[string]string{}, []string{}
	for _, r := range runs {
		c, ok := colour[r.Variant]
		if !ok {
			c = plotColors[len(colour)%len(plotColors)]
			colour[r.Variant] = c
			legend = append(legend, r.Variant)
		}
		var pts []string
		for _, p := range r.Curve {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(p.Loss)))
		}
		dash := ""
		if r.Round > 0 {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<polyline clip-path="url(#plot)" fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`+"\n", c, dash, strings.Join(pts, " "))
	}
	for i, name := range legend {
		ly := top + 10 + 18*float64(i)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/><text x="%g" y="%g">%s</text>`+"\n",
			left+pw+12, ly, left+pw+36, ly, colour[name], left+pw+42, ly+4, html.EscapeString(name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// plotRange is the y range: from just below the lowest loss to the highest loss of any
// evaluation after each run's first, at most 1.2 above the lowest, rounded out to 0.1.
func plotRange(runs []Trial) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		for i, p := range r.Curve {
			lo = math.Min(lo, p.Loss)
			if i > 0 {
				hi = math.Max(hi, p.Loss)
			}
		}
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	if !(hi > lo) {
		hi = lo + 1
	}
	hi = math.Min(hi, lo+1.2)
	return math.Floor(lo*10-0.5) / 10, math.Ceil(hi*10) / 10
}

// ticks are about n round values from lo to hi.
func ticks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if !(span > 0) {
		return []float64{lo}
	}
	step := math.Pow(10, math.Floor(math.Log10(span/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}
