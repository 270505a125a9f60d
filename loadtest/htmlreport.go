package loadtest

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// The HTML and JSON forms of a Report. Both take everything from the
// Report itself: a field added to Report shows in the JSON as it is, and
// in the page with one line of htmlreport.html.

//go:embed htmlreport.html
var htmlReportText string

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{
	"dur":         func(d time.Duration) string { return round(d).String() },
	"lower":       strings.ToLower,
	"color":       outcomeColor,
	"sorted":      outcomeOrder,
	"percent":     func(n, of int) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/math.Max(1, float64(of))) },
	"linClass":    linClass,
	"checks":      checksText,
	"groupChecks": func(g ProductGroup) string { return g.checksText() },
}).Parse(htmlReportText))

// linClass is the status class of a linearizability verdict, as the
// invariants' statuses: yes passes, NO fails, unknown warns (it is not a
// pass), and a check left out is skipped.
func linClass(v LinVerdict) string {
	switch v {
	case LinYes:
		return "pass"
	case LinNo:
		return "fail"
	case LinUnknown:
		return "warn"
	}
	return "skip"
}

// WriteHTML writes the report as one self-contained HTML page: the
// verdict, the invariants with pass or fail, charts of stock and sold over
// the sale, of the outcomes over time and of the latency, and the numbers
// of the text report. It loads nothing from anywhere.
func (r Report) WriteHTML(w io.Writer) error {
	top, rest := r.Hottest()
	return htmlReport.Execute(w, htmlReportData{
		Report:        r,
		Top:           top,
		Rest:          rest,
		S:             supply(r.Before),
		SaleChart:     r.SaleChart(720, 260),
		LifeChart:     r.lifeChart(720, 240),
		OutcomesChart: r.OutcomesChart(720, 220),
		LatencyChart:  r.LatencyChart(720, 220),
	})
}

// htmlReportData is what the template sees: the Report, its hottest
// products and the rest summed (Report.Hottest), and its charts.
type htmlReportData struct {
	Report
	Top                                    []ProductReport
	Rest                                   ProductGroup
	S                                      int64
	SaleChart, OutcomesChart, LatencyChart template.HTML
	LifeChart                              template.HTML // "" without a window
}

// lifeChart is the reservations' chart, or nothing without them.
func (r Report) lifeChart(w, h int) template.HTML {
	if r.Reservations == nil {
		return ""
	}
	return r.Reservations.LifeChart(w, h)
}

// WriteJSON writes the Report as indented JSON. Durations are in
// nanoseconds, as Go encodes time.Duration.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// addCharts fills in the data of the charts from what the tally saw and
// the samples of the product: the state before the attack, the samples,
// and the state read back after it.
func (r *Report) addCharts(t *tally, samples []Sample) {
	r.Timeline = buildTimeline(t.events, t.end)
	r.Samples = make([]Sample, 0, len(samples)+2)
	r.Samples = append(r.Samples, Sample{At: 0, Stock: r.Before.Stock, Reserved: r.Before.Reserved, Sold: r.Before.Sold})
	r.Samples = append(r.Samples, samples...)
	end := t.end
	if n := len(samples); n > 0 {
		end = max(end, samples[n-1].At)
	}
	r.Samples = append(r.Samples, Sample{At: end, Stock: r.After.Stock, Reserved: r.After.Reserved, Sold: r.After.Sold})
}

// createReportFiles creates the report files before the attack, so that a
// bad path is a usage error before any load is sent rather than a lost
// run after it.
func createReportFiles(cfg Config) error {
	for _, p := range []string{cfg.Report, cfg.ReportJSON} {
		if p == "" {
			continue
		}
		f, err := os.Create(p)
		if err != nil {
			return fmt.Errorf("%w: report file: %v", ErrInvalidConfig, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("%w: report file: %v", ErrInvalidConfig, err)
		}
	}
	return nil
}

// writeReportFiles writes the HTML and JSON reports the Config asks for.
func (r Report) writeReportFiles(cfg Config) error {
	var errs []error
	if cfg.Report != "" {
		errs = append(errs, writeFile(cfg.Report, r.WriteHTML))
	}
	if cfg.ReportJSON != "" {
		errs = append(errs, writeFile(cfg.ReportJSON, r.WriteJSON))
	}
	return errors.Join(errs...)
}

// writeFile writes a file with write, reporting any failure with the path.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	w := bufio.NewWriter(f)
	err = errors.Join(write(w), w.Flush(), f.Close())
	if err != nil {
		return fmt.Errorf("loadtest: write %s: %w", path, err)
	}
	return nil
}

// Colours of the series and outcomes, in every chart.
const (
	colorStock   = "#2563eb"
	colorSold    = "#ea580c"
	colorCreated = "#16a34a"
	colorLimit   = "#dc2626"
	colorTotal   = "#7c3aed"
)

// outcomeColor is the colour of an outcome key in the charts.
func outcomeColor(key string) string {
	switch {
	case key == "201":
		return colorCreated
	case strings.Contains(key, codeSoldOut):
		return "#94a3b8"
	case strings.Contains(key, codeAlreadyPurchased):
		return "#a855f7"
	case strings.Contains(key, codeBusy):
		return "#f59e0b"
	case key == "error":
		return "#111827"
	}
	return colorLimit
}

// outcomeOrder lists the outcome keys of counts in a fixed order: the
// sale's outcomes first, then the rest alphabetically.
func outcomeOrder(counts map[string]int) []string {
	rank := func(k string) int {
		switch {
		case k == "201":
			return 0
		case strings.Contains(k, codeSoldOut):
			return 1
		case strings.Contains(k, codeAlreadyPurchased):
			return 2
		case strings.Contains(k, codeBusy):
			return 3
		}
		return 4
	}
	keys := sortedKeys(counts)
	slices.SortStableFunc(keys, func(a, b string) int { return rank(a) - rank(b) })
	return keys
}

// SaleChart draws stock and sold over the sale as an SVG: the stock to
// sell S as a dashed line, the product's stock, sold (and reserved, with
// a payment window) and their sum as the server answered during the
// attack, and the 201s the load test received.
// In a correct sale the sum stays on the S line; an oversell lifts it
// above, and when the stock runs out, draws sold above the line too.
func (r Report) SaleChart(w, h int) template.HTML {
	s := supply(r.Before)
	end := r.Elapsed
	top := float64(s)
	for _, x := range r.Samples {
		end = max(end, x.At)
		top = max(top, float64(x.Stock+x.Reserved+x.Sold))
	}
	top = max(top, float64(r.Before.Sold+int64(r.Created)))
	xmax := end.Seconds()
	c := newSVGChart(w, h, xmax, niceCeil(top*1.05), "sale-chart",
		"data-s", fmt.Sprint(s), "data-sold", fmt.Sprint(r.After.Sold), "data-oversold", fmt.Sprint(r.Oversold))
	c.axes(countLabel, niceStep(xmax, 6), secondsLabel)
	c.hline(float64(s), colorLimit, "limit", fmt.Sprintf("S = %d", s))
	var stock, reserved, sold, total, created [][2]float64
	for _, x := range r.Samples {
		stock = append(stock, [2]float64{x.At.Seconds(), float64(x.Stock)})
		reserved = append(reserved, [2]float64{x.At.Seconds(), float64(x.Reserved)})
		sold = append(sold, [2]float64{x.At.Seconds(), float64(x.Sold)})
		total = append(total, [2]float64{x.At.Seconds(), float64(x.Stock + x.Reserved + x.Sold)})
	}
	created = append(created, [2]float64{0, float64(r.Before.Sold)})
	for _, st := range r.Timeline.Steps {
		created = append(created, [2]float64{(st.Start + r.Timeline.Step).Seconds(), float64(r.Before.Sold + int64(st.Created201))})
	}
	c.line(total, colorTotal, "total", true)
	c.line(created, colorCreated, "created", true)
	c.line(stock, colorStock, "stock", false)
	if r.Reservations != nil {
		c.line(reserved, colorReserved, "reserved", false)
	}
	c.line(sold, colorSold, "sold", false)
	return c.html()
}

// OutcomesChart draws the answers per step, stacked by outcome, as an SVG.
func (r Report) OutcomesChart(w, h int) template.HTML {
	tl := r.Timeline
	top := 0
	for _, st := range tl.Steps {
		n := 0
		for _, v := range st.ByOutcome {
			n += v
		}
		top = max(top, n)
	}
	width := tl.Step.Seconds()
	xmax := float64(len(tl.Steps)) * width
	c := newSVGChart(w, h, xmax, niceCeil(float64(top)), "outcomes-chart")
	c.axes(countLabel, niceStep(xmax, 6), secondsLabel)
	for _, st := range tl.Steps {
		base := 0
		for _, k := range outcomeOrder(st.ByOutcome) {
			n := st.ByOutcome[k]
			c.bar(st.Start.Seconds(), width, float64(base), float64(base+n), outcomeColor(k), "bar")
			base += n
		}
	}
	return c.html()
}

// LatencyChart draws the p50 and p99 latency of the answers of each step,
// in milliseconds, as an SVG.
func (r Report) LatencyChart(w, h int) template.HTML {
	tl := r.Timeline
	var p50, p99 [][2]float64
	top := 0.0
	for _, st := range tl.Steps {
		if st.Latency.Count == 0 {
			continue
		}
		mid := (st.Start + tl.Step/2).Seconds()
		p50 = append(p50, [2]float64{mid, millis(st.Latency.P50)})
		p99 = append(p99, [2]float64{mid, millis(st.Latency.P99)})
		top = max(top, millis(st.Latency.P99))
	}
	xmax := float64(len(tl.Steps)) * tl.Step.Seconds()
	c := newSVGChart(w, h, xmax, niceCeil(top), "latency-chart")
	c.axes(func(v float64) string { return countLabel(v) + "ms" }, niceStep(xmax, 6), secondsLabel)
	c.line(p50, "#0891b2", "p50", false)
	c.line(p99, "#7c3aed", "p99", false)
	return c.html()
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
