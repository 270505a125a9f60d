package loadtest

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/browsertest"
)

// svgYs returns the y coordinates of the first element of class in svg:
// the points of a polyline, or y1 of a line.
func svgYs(t *testing.T, svg, element, class string) []float64 {
	t.Helper()
	m := regexp.MustCompile(`<` + element + ` class="` + class + `" ([^>]*)>`).FindStringSubmatch(svg)
	if m == nil {
		t.Fatalf("no <%s class=%q> in the chart", element, class)
	}
	var ys []float64
	if p := regexp.MustCompile(`points="([^"]*)"`).FindStringSubmatch(m[1]); p != nil {
		for _, pt := range strings.Fields(p[1]) {
			_, y, _ := strings.Cut(pt, ",")
			v, err := strconv.ParseFloat(y, 64)
			if err != nil {
				t.Fatalf("point %q: %v", pt, err)
			}
			ys = append(ys, v)
		}
		return ys
	}
	y := regexp.MustCompile(`y1="([^"]*)"`).FindStringSubmatch(m[1])
	v, err := strconv.ParseFloat(y[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return []float64{v}
}

// soldAboveLimit reports whether the sale chart draws sold above the S
// line (a smaller y is higher up).
func soldAboveLimit(t *testing.T, page string) bool {
	t.Helper()
	limit := svgYs(t, page, "line", "limit")[0]
	top := limit
	for _, y := range svgYs(t, page, "polyline", "sold") {
		top = min(top, y)
	}
	return top < limit-0.5
}

// The HTML report of a correct sale: the verdict, every invariant passed,
// and a chart of stock and sold that stays at or under the stock; the
// JSON report is the Report itself.
func TestHTMLReportOfACorrectSale(t *testing.T) {
	a, _ := newFakeShop(false).serve(t)
	dir := t.TempDir()
	cfg := shortSale(a)
	cfg.Report = filepath.Join(dir, "report.html")
	cfg.ReportJSON = filepath.Join(dir, "report.json")
	cfg.SampleInterval = 5 * time.Millisecond
	rep, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.Report)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		`<div class="verdict pass" id="verdict">PASS: every safety invariant held, nothing oversold, the history is linearizable</div>`,
		`<dd id="s">20</dd>`,
		`<dd id="stock-left">0</dd>`,
		`<dd id="shape">` + rep.Shape + `</dd>`,
		`<span class="status pass" id="linearizable" data-verdict="yes">linearizable: yes (`,
		`<svg class="sale-chart"`, `<svg class="outcomes-chart"`, `<svg class="latency-chart"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if n := strings.Count(page, `data-status="PASS"`); n != 6 {
		t.Errorf("got %d passed invariants on the page, want all 6", n)
	}
	if strings.Contains(page, `data-status="FAIL"`) {
		t.Error("page shows a failed invariant")
	}
	for _, absent := range []string{`id="mix"`, `id="side"`, `id="restocked"`} {
		if strings.Contains(page, absent) {
			t.Errorf("page has %s, but nothing was mixed into the sale", absent)
		}
	}
	if soldAboveLimit(t, page) {
		t.Error("the chart draws sold above S for a sale that sold exactly S")
	}
	if len(rep.Timeline.Steps) == 0 || len(rep.Timeline.Steps) > MaxSteps {
		t.Errorf("got %d steps, want 1..%d", len(rep.Timeline.Steps), MaxSteps)
	}
	if last := rep.Timeline.Steps[len(rep.Timeline.Steps)-1]; last.Created201 != rep.Created {
		t.Errorf("the timeline ends with %d 201s, want %d", last.Created201, rep.Created)
	}
	if n := len(rep.Samples); n < 2 || rep.Samples[0].Stock != 20 || rep.Samples[n-1].Sold != 20 {
		t.Errorf("samples %+v: want the product before (stock 20) first and after (sold 20) last", rep.Samples)
	}
	// External references: none.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(page); m != "" {
		t.Errorf("page loads %q", m)
	}

	j, err := os.ReadFile(cfg.ReportJSON)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if back.Verdict() != rep.Verdict() || back.After != rep.After || back.Created != rep.Created ||
		back.Latency != rep.Latency || len(back.Invariants) != 6 || len(back.Timeline.Steps) != len(rep.Timeline.Steps) ||
		back.Shape != rep.Shape || back.Linearizability.Verdict != LinYes || back.Linearizability.Operations != rep.Linearizability.Operations {
		t.Errorf("the JSON report does not read back as the Report: got %+v", back)
	}
}

// The control: a shop that oversells gets a red verdict, failed
// invariants, and a chart whose sold line rises above S.
func TestHTMLReportOfAnOversell(t *testing.T) {
	a, _ := newFakeShop(true).serve(t)
	cfg := shortSale(a)
	cfg.Report = filepath.Join(t.TempDir(), "report.html")
	rep, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Oversold || rep.After.Sold <= 20 {
		t.Fatalf("the racy shop sold %d of 20 (oversold %v): the control did not oversell", rep.After.Sold, rep.Oversold)
	}
	b, err := os.ReadFile(cfg.Report)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if !strings.Contains(page, `<div class="verdict fail" id="verdict">FAIL: OVERSOLD`) {
		t.Error("page lacks the failed verdict")
	}
	if !strings.Contains(page, `data-number="3" data-status="FAIL"`) {
		t.Error("page does not fail invariant 3, stock + sold == S")
	}
	if !soldAboveLimit(t, page) {
		t.Error("the chart does not draw sold above S for a sale that sold more than S")
	}
	if v := rep.Linearizability.Verdict; !strings.Contains(page, `id="linearizable" data-verdict="`+string(v)+`"`) {
		t.Errorf("page lacks the linearizability verdict %q", v)
	}
}

// A mixed sale whose counts are clean but whose history is not
// linearizable (a restock answers a state it did not set): the page fails
// on the linearizability line, not on an invariant, and shows the mix;
// the JSON carries the verdict and the mix. The restocks here are paced
// by time (40 a second): the shop holds its first purchase until one has
// set the stock, however soon the other purchases are done.
func TestHTMLReportOfANonLinearizableMixedSale(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	shop := newFakeShop(false)
	shop.lateRestockAnswer = true
	shop.holdFirstPurchaseForRestock()
	a, _ := shop.serve(t)
	dir := t.TempDir()
	cfg := mixedSale(dir, a)
	cfg.Stock = 1000 // purchases keep selling, so every restock sees one after it
	cfg.Mix = Mix{Restocks: 40}
	cfg.Report = filepath.Join(dir, "report.html")
	cfg.ReportJSON = filepath.Join(dir, "report.json")
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Restocks == 0 {
		t.Fatalf("fault not injected: no restock ran during the sale\n%s", out.String())
	}
	if rep.Oversold || rep.Linearizability.Verdict != LinNo {
		t.Fatalf("got oversold %v, %s, %d restocks; want clean counts, NO, and restocks", rep.Oversold, rep.Linearizability.Line(), rep.Restocks)
	}
	b, err := os.ReadFile(cfg.Report)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		`<div class="verdict fail" id="verdict">FAIL: NOT LINEARIZABLE`,
		`<span class="status fail" id="linearizable" data-verdict="NO">linearizable: NO (product ` + strconv.FormatInt(rep.ProductID, 10),
		`<dd id="mix">restocks=40/s</dd>`,
		`<dd id="side">0 reads and ` + strconv.Itoa(rep.Restocks) + ` restocks mixed into the sale</dd>`,
		`id="restocked"`,
		"history.jsonl",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, `data-status="FAIL"`) {
		t.Error("page fails an invariant, but the counts are clean")
	}
	j, err := os.ReadFile(cfg.ReportJSON)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if back.Linearizability.Verdict != LinNo || back.Linearizability.Anomaly != rep.Linearizability.Anomaly ||
		back.Mix != cfg.Mix || back.Restocks != rep.Restocks || back.OK() {
		t.Errorf("the JSON report: got %+v, want the violation, the mix and the restocks", back)
	}
}

// An unwritable report path is a usage error before any load is sent.
func TestHTMLReportBadPath(t *testing.T) {
	shop := newFakeShop(false)
	a, hits := shop.serve(t)
	cfg := shortSale(a)
	cfg.Report = filepath.Join(t.TempDir(), "no", "such", "dir", "r.html")
	_, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "report file") {
		t.Fatalf("got %v, want a report file error", err)
	}
	if hits.Load() != 0 {
		t.Errorf("got %d purchases sent, want none", hits.Load())
	}
}

func TestBuildTimeline(t *testing.T) {
	ms := time.Millisecond
	events := []event{
		{end: 1 * ms, latency: 1 * ms, key: "201"},
		{end: 3 * ms, latency: 3 * ms, key: "201"},
		{end: 12 * ms, latency: 9 * ms, key: "409 sold_out"},
		{end: 15 * ms, latency: 2 * ms, key: "201"},
	}
	tl := buildTimeline(events, 15*ms)
	if tl.Step != ms || len(tl.Steps) != 16 {
		t.Fatalf("got %d steps of %v, want 16 of 1ms", len(tl.Steps), tl.Step)
	}
	if tl.Steps[1].ByOutcome["201"] != 1 || tl.Steps[3].Created201 != 2 || tl.Steps[12].ByOutcome["409 sold_out"] != 1 || tl.Steps[15].Created201 != 3 {
		t.Errorf("got %+v", tl.Steps)
	}
	if tl.Steps[3].Latency.P99 != 3*ms || tl.Steps[2].Latency.Count != 0 {
		t.Errorf("step latencies: got %+v and %+v", tl.Steps[3].Latency, tl.Steps[2].Latency)
	}
	for _, tt := range []struct{ elapsed, want time.Duration }{
		{0, ms}, {99 * ms, ms}, {100 * ms, 2 * ms}, {450 * ms, 5 * ms}, {3 * time.Second, 50 * ms}, {10 * time.Minute, 10 * time.Second},
	} {
		if got := stepWidth(tt.elapsed); got != tt.want {
			t.Errorf("stepWidth(%v): got %v, want %v", tt.elapsed, got, tt.want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ v, want float64 }{
		{0, 4}, {3, 4}, {100, 100}, {101, 200}, {846, 1000}, {1050, 2000}, {0.3, 0.4},
	} {
		if got := niceCeil(tt.v); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("niceCeil(%g): got %g, want %g", tt.v, got, tt.want)
		}
	}
}

// The report of a sale of 2,000 products, in a real browser: the hottest
// products one by one, the rest in one line, so that the page is as long
// as that of one product's sale.
func TestHTMLReportOfManyProductsStaysShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: headless Chromium")
	}
	a, _ := newFakeShop(false).serve(t)
	dir := t.TempDir()
	one := shortSale(a)
	one.Report = filepath.Join(dir, "one.html")
	many := manyProductsSale(a)
	many.Products, many.MaxRequests = 2000, 1000
	many.Report = filepath.Join(dir, "many.html")
	var rep Report
	for _, cfg := range []Config{one, many} {
		var err error
		if rep, err = Run(t.Context(), cfg, io.Discard); err != nil || !rep.OK() {
			t.Fatalf("Run: %v, verdict %q", err, rep.Verdict())
		}
	}
	top, rest := rep.Hottest()
	b := browsertest.Start(t, 1200, 900)
	height := map[string]int{}
	for _, name := range []string{"one", "many"} {
		b.Navigate("file://" + filepath.Join(dir, name+".html"))
		height[name] = browsertest.Eval[int](b, `document.body.scrollHeight`)
		b.Screenshot(browsertest.ScreenshotPath(t, "report-"+name+".png"))
	}
	rows := browsertest.Eval[int](b, `document.querySelectorAll("#hottest tr[data-product]").length`)
	restLine := browsertest.Eval[string](b, `document.getElementById("rest").cells[0].textContent`)
	first := browsertest.Eval[string](b, `document.querySelector("#hottest tr[data-product]").dataset.product`)
	if rows != HottestShown || len(top) != HottestShown || restLine != "1990 more" || rest.Count != 1990 {
		t.Errorf("got %d product rows and %q (report: %d, %d more), want %d and \"1990 more\"", rows, restLine, len(top), rest.Count, HottestShown)
	}
	if first != strconv.FormatInt(top[0].ID, 10) || top[0].Demand < top[len(top)-1].Demand {
		t.Errorf("first row: product %s, want the most demanded, %d", first, top[0].ID)
	}
	// The hottest table adds a dozen rows to the page, not 2,000.
	if extra := height["many"] - height["one"]; extra > 600 {
		t.Errorf("the page of 2000 products is %d px taller than one product's (%d px), want at most 600", extra, height["one"])
	}
}
