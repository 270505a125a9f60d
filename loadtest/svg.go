package loadtest

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
)

// svgChart draws a chart as inline SVG: no script and nothing to fetch, so
// the report opens offline and prints. Data coordinates run from 0 to xmax
// and ymax; the chart maps them into its plot area.
type svgChart struct {
	w, h       float64
	l, r, t, b float64 // padding around the plot area
	xmax, ymax float64
	sb         strings.Builder
}

func newSVGChart(w, h int, xmax, ymax float64, class string, attrs ...string) *svgChart {
	c := &svgChart{w: float64(w), h: float64(h), l: 52, r: 12, t: 10, b: 24,
		xmax: math.Max(xmax, 1e-9), ymax: math.Max(ymax, 1e-9)}
	fmt.Fprintf(&c.sb, `<svg class="%s" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" role="img"`,
		html.EscapeString(class), w, h, w, h)
	for i := 0; i+1 < len(attrs); i += 2 {
		fmt.Fprintf(&c.sb, ` %s="%s"`, attrs[i], html.EscapeString(attrs[i+1]))
	}
	c.sb.WriteString(">")
	return c
}

func (c *svgChart) x(v float64) float64 { return c.l + (c.w-c.l-c.r)*v/c.xmax }
func (c *svgChart) y(v float64) float64 { return c.h - c.b - (c.h-c.t-c.b)*v/c.ymax }

// axes draws the grid, the y labels (yfmt) at four steps, and the x labels
// (xfmt) at steps of xstep.
func (c *svgChart) axes(yfmt func(float64) string, xstep float64, xfmt func(float64) string) {
	for i := 0; i <= 4; i++ {
		v := c.ymax * float64(i) / 4
		fmt.Fprintf(&c.sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eef0f3"/>`, c.l, c.w-c.r, c.y(v), c.y(v))
		c.text(c.l-4, c.y(v)+4, "end", yfmt(v))
	}
	fmt.Fprintf(&c.sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#98a2b3"/>`, c.l, c.w-c.r, c.y(0), c.y(0))
	if xstep > 0 {
		for v := 0.0; v <= c.xmax*1.0001; v += xstep {
			c.text(c.x(v), c.h-6, "middle", xfmt(v))
		}
	}
}

func (c *svgChart) text(x, y float64, anchor, s string) {
	fmt.Fprintf(&c.sb, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="10" fill="#667085">%s</text>`, x, y, anchor, html.EscapeString(s))
}

// line draws a polyline through pts (data coordinates).
func (c *svgChart) line(pts [][2]float64, color, class string, dashed bool) {
	if len(pts) == 0 {
		return
	}
	var p strings.Builder
	for i, pt := range pts {
		if i > 0 {
			p.WriteByte(' ')
		}
		fmt.Fprintf(&p, "%.1f,%.1f", c.x(pt[0]), c.y(pt[1]))
	}
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="5 3"`
	}
	fmt.Fprintf(&c.sb, `<polyline class="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, class, p.String(), color, dash)
}

// hline draws a horizontal line across the plot at y, with a label.
func (c *svgChart) hline(y float64, color, class, label string) {
	fmt.Fprintf(&c.sb, `<line class="%s" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`,
		class, c.l, c.w-c.r, c.y(y), c.y(y), color)
	c.text(c.w-c.r-2, c.y(y)-4, "end", label)
}

// bar draws a rectangle from (x, y0) to (x+width, y1), in data coordinates.
func (c *svgChart) bar(x, width, y0, y1 float64, color, class string) {
	fmt.Fprintf(&c.sb, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`,
		class, c.x(x), c.y(y1), math.Max(0.5, c.x(x+width)-c.x(x)-0.5), c.y(y0)-c.y(y1), color)
}

func (c *svgChart) html() template.HTML {
	c.sb.WriteString("</svg>")
	return template.HTML(c.sb.String()) // built from numbers and escaped text only
}

// niceCeil is the top of an axis of four steps of 1, 2, 2.5 or 5 times a
// power of ten, at or above v: every tick is a round number.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 4
	}
	step := v / 4
	p := math.Pow(10, math.Floor(math.Log10(step)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= step*0.9999999 {
			return 4 * m * p
		}
	}
	return 40 * p
}

// niceStep is a round step that cuts span into at most about n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// secondsLabel writes a time in seconds the way the text report does.
func secondsLabel(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1:
		return fmt.Sprintf("%gms", math.Round(s*1e4)/10)
	default:
		return fmt.Sprintf("%gs", math.Round(s*100)/100)
	}
}

func countLabel(v float64) string { return fmt.Sprintf("%g", math.Round(v*100)/100) }
