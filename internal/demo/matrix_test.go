package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/browsertest"
)

// The lock design's rows of the matrix, on redis-server (the lock is
// tested against the real server, not the embedded stand-in), show
// oversell exactly where they should: not under the Redis lock, batched or
// not, with or without expiring leases (the fence refuses the late
// writes), a cut Redis link, a Redlock node's clock jump or a Redis
// restart, and in each of the broken configurations, with nothing injected
// into the rows without a fault: the burst alone races. The rows without
// an oversell must also have linearizable histories, and the fault rows
// must show their fault (leases lost, late writes refused; for the network
// faults, another replica selling while replica 1 was caught in its
// critical section; over many products, a restart or a kill that caught
// holders of several products in their critical sections). (The other
// designs' rows: TestMatrixDesigns.)
//
// The clock jump rows need internal/fakeclock, which needs Linux:
// elsewhere they must say so and be skipped, and the matrix passes with
// the others.
func TestMatrix(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: every lock mode's demo sale, and the report in a browser")
	}
	reports := t.TempDir()
	page, data := filepath.Join(reports, "matrix.html"), filepath.Join(reports, "matrix.json")
	// 10 buyers per item: enough for the broken modes' race, with nothing
	// injected, and for every fault; more only makes each row longer.
	r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"},
		"-matrix", "-design", "lock", "-buyers", "500", "-stock", "50", "-report", page, "-report-json", data)
	if r.code != 0 {
		t.Errorf("exit status: got %d, want 0", r.code)
	}
	wants := []string{
		"oversold  linearizable  purchases/s",
		"ok       redis did not oversell and is linearizable",
		"ok       redis (one at a time) did not oversell and is linearizable",
		"ok       local oversold",
		"ok       none oversold",
		"ok       redis (lease expiry) did not oversell and is linearizable",
		"ok       redis (lease expiry, no fence) oversold",
		"ok       redis (link cut) did not oversell and is linearizable",
		"ok       redis (link cut, no fence) oversold",
		"ok       redis (clock jump) (redlock) did not oversell and is linearizable",
		"ok       redis (clock jump, no fence) (redlock) oversold",
		"ok       redis (lease expiry) (500 products) did not oversell and is linearizable",
		"ok       redis (lease expiry, no fence) (500 products) oversold",
		"ok       redis (Redis restarted) (500 products) did not oversell and is linearizable",
		"ok       redis (Redis restarted, no fence) (500 products) oversold",
		"ok       redis (replica killed) (500 products) did not oversell and is linearizable",
		"ok       redis (replica killed, no fence) (500 products) oversold",
		"ok       redis (Redis restarted) held, as expected",
		passLine,
	}
	if !clockJumps {
		wants = slices.DeleteFunc(wants, func(w string) bool { return strings.Contains(w, "clock jump") })
		wants = append(wants,
			"SKIPPED  redis (clock jump) (redlock): "+clockSkip,
			"SKIPPED  redis (clock jump, no fence) (redlock): "+clockSkip)
	}
	for _, want := range wants {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	// The rows' temporary directories, which the matrix does not print,
	// are checked to be gone by TestMain (tempDirRun).
	assertRedisGone(t, r)
	checkMatrixJSON(t, data)
	checkMatrixPage(t, page)
}

// The designs' rows, each design alone (-design), on redis-server: each
// row comes out as matrix_designs.go says it must, its fault checked to
// have happened, and the matrix passes. A design's failure that is not the
// expected one (or a fault that did not happen) fails it.
func TestMatrixDesigns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: four to six sales per design, most of them with a fault")
	}
	for _, tt := range []struct {
		design string
		wants  []string
	}{
		{"conditional", []string{
			"ok       conditional held, as expected",
			"ok       conditional (kill -9 mid-sale) held, as expected",
			"ok       conditional (restocks) held, as expected",
			"ok       conditional (reservations) held, as expected",
			"matrix: PASS: all 4 rows as expected",
		}},
		{"redis-counter", []string{
			"ok       redis-counter held, as expected",
			"ok       redis-counter (kill -9 between take and insert) lost sales, as expected",
			"ok       redis-counter (Redis restarted) sold items twice, as expected",
			"ok       redis-counter (restocks) held, as expected",
			"ok       redis-counter (reservations) held, as expected",
			"ok       redis-counter (kill -9 between the database's return and Redis's) lost units, as expected",
			"matrix: PASS: all 6 rows as expected",
		}},
		{"redis-counter-async", []string{
			"ok       redis-counter-async held, as expected",
			"ok       redis-counter-async (kill -9 between take and write) held, as expected",
			"ok       redis-counter-async (Redis restarted) lost orders and sold items twice, as expected",
			"ok       redis-counter-async (restocks) held, as expected",
			"matrix: PASS: all 4 rows as expected",
		}},
	} {
		t.Run(tt.design, func(t *testing.T) {
			t.Parallel()
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"},
				"-matrix", "-design", tt.design, "-buyers", "500", "-stock", "50")
			if r.code != 0 {
				t.Errorf("exit status: got %d, want 0", r.code)
			}
			for _, want := range tt.wants {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			if t.Failed() {
				t.Logf("stdout:\n%s", r.stdout)
			}
			assertRedisGone(t, r)
		})
	}
}

// The lock design's reservation rows (-rows reservations), on
// redis-server: each comes out as matrix_lifelock.go says it must, its
// fault proved from the replicas' /metrics and the orders (two replicas
// expiring at once, a replica killed or stopped in an expiry's critical
// section, payments racing an expiry), every check of the sale passing;
// and each control caught by the checks it breaks. A fault that did not
// happen, or a control not caught, fails the matrix.
func TestMatrixLockReservations(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: seven sales with a payment window, most of them with a fault")
	}
	r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"},
		"-matrix", "-rows", "reservations", "-design", "lock", "-stock", "50")
	if r.code != 0 {
		t.Errorf("exit status: got %d, want 0", r.code)
	}
	for _, want := range []string{
		"ok       redis (two replicas expiring at once) (reservations) held, as expected",
		"ok       redis (replica killed mid-expiry) (reservations) held, as expected",
		"ok       redis (replica stopped past its lease mid-expiry) (reservations) held, as expected",
		"ok       redis (payment racing the expiry) (reservations) held, as expected",
		"ok       redis (unsafe expiry unlocked) (reservations) was caught, as expected",
		"must fail 2 (available + reserved + sold == S), 5 (available + pending + paid == S)",
		"ok       redis (unsafe expiry unchecked) (reservations) was caught, as expected",
		"must fail 8 (every payment answered 200 is paid)",
		"ok       redis (unsafe pay late) (reservations) was caught, as expected",
		"must fail 9 (no payment after its window)",
		"matrix: PASS: all 7 rows as expected",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	assertRedisGone(t, r)
}

// clockJumps is whether the matrix's clock jump rows run here: their
// fault needs internal/fakeclock, which needs Linux. Elsewhere they are
// skipped with clockSkip, and passLine counts them.
var clockJumps = runtime.GOOS == "linux"

const clockSkip = "needs Linux (LD_PRELOAD), to move a redis-server's clock"

// passLine is the lock design matrix's verdict.
var passLine = func() string {
	if clockJumps {
		return "matrix: PASS: all 17 rows as expected"
	}
	return "matrix: PASS: all 15 rows that ran as expected, 2 skipped"
}()

// skippedHere reports whether a row of fault fault is skipped on this
// system.
func skippedHere(fault string) bool { return !clockJumps && strings.HasPrefix(fault, "clock jump") }

// checkMatrixJSON reads -report-json back: every row with its report.
func checkMatrixJSON(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Passed bool `json:"passed"`
		Rows   []struct {
			Mode           string `json:"mode"`
			Products       int    `json:"products"`
			Fault          string `json:"fault"`
			ExpectOversell bool   `json:"expect_oversell"`
			LeasesLost     int64  `json:"leases_lost"`
			FenceRejected  int64  `json:"fence_rejected"`
			FaultEvidence  string `json:"fault_evidence"`
			Sales          int    `json:"sales"`
			Linearizable   string `json:"linearizable"`
			Verdict        string `json:"verdict"`
			Report         struct {
				Oversold        bool
				Requests        int
				Linearizability struct{ Verdict string }
			} `json:"report"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("matrix JSON: %v", err)
	}
	if !m.Passed || len(m.Rows) != 17 {
		t.Fatalf("matrix JSON: passed %v with %d rows, want true with 17", m.Passed, len(m.Rows))
	}
	for _, row := range m.Rows {
		if skippedHere(row.Fault) {
			if row.Verdict != "skipped" {
				t.Errorf("matrix JSON row %s (%s): verdict %q, want skipped on %s", row.Mode, row.Fault, row.Verdict, runtime.GOOS)
			}
			continue
		}
		if row.Verdict != "ok" || row.Report.Oversold != row.ExpectOversell || row.Report.Requests == 0 ||
			row.Linearizable != row.Report.Linearizability.Verdict || (!row.ExpectOversell && row.Linearizable != "yes") {
			t.Errorf("matrix JSON row %+v: want verdict ok, oversold as expected, linearizable where not, and the sale's report", row)
		}
		// The fault rows show their fault: leases lost (but for a
		// Redlock node's clock jump, whose holder may write before it
		// learns, and a killed replica), with the fence on, late writes
		// refused (but for a killed replica, which writes nothing), and
		// for the network faults and the restart and kill over many
		// products what the fault did. (The one-product Redis restart's
		// evidence is the design rows' own: TestMatrixDesigns.)
		fenced, jump := !strings.Contains(row.Fault, "no fence"), strings.HasPrefix(row.Fault, "clock jump")
		many := row.Products > 1
		kill := many && strings.HasPrefix(row.Fault, "replica killed")
		if many && row.Products != 500 {
			t.Errorf("matrix JSON row %s (%s): %d products, want 1 or 500", row.Mode, row.Fault, row.Products)
		}
		if kill {
			if row.FaultEvidence == "" || (!fenced) != row.Report.Oversold {
				t.Errorf("matrix JSON row %s (%s): evidence %q: the kill did not show", row.Mode, row.Fault, row.FaultEvidence)
			}
			continue
		}
		net := jump || strings.HasPrefix(row.Fault, "link cut") || (many && strings.HasPrefix(row.Fault, "Redis restarted"))
		if (net || strings.HasPrefix(row.Fault, "lease expiry")) &&
			((row.LeasesLost == 0 && !jump) || (fenced && row.FenceRejected == 0) || (net && row.FaultEvidence == "")) {
			t.Errorf("matrix JSON row %s (%s): %d leases lost, %d fence rejections, evidence %q: the fault did not show",
				row.Mode, row.Fault, row.LeasesLost, row.FenceRejected, row.FaultEvidence)
		}
		if row.Sales < 1 || row.Sales > 3 {
			t.Errorf("matrix JSON row %s (%s): %d sales, want 1 to 3", row.Mode, row.Fault, row.Sales)
		}
	}
}

// rowsJS reads the matrix page's rows: their data, their oversold and
// linearizable cells, and whether the chart draws sold, or stock + sold,
// above the S line (a smaller y is higher up the chart).
const rowsJS = `[...document.querySelectorAll("#matrix tr.row")].map(tr => {
  const svg = tr.querySelector("svg.sale-chart");
  const limit = svg && svg.querySelector("line.limit");
  const above = cls => {
    const line = svg && svg.querySelector("polyline." + cls);
    if (!limit || !line) return false;
    const top = Math.min(...line.getAttribute("points").trim().split(/\s+/).map(p => Number(p.split(",")[1])));
    return top < Number(limit.getAttribute("y1")) - 0.5;
  };
  const cell = cls => tr.querySelector("td." + cls) ? tr.querySelector("td." + cls).textContent.trim() : "";
  return {
    mode: tr.dataset.mode, fault: tr.dataset.fault, label: tr.dataset.label,
    expected: tr.dataset.expected, verdict: tr.dataset.verdict,
    oversold: cell("oversold"), linearizable: cell("linearizable"),
    chart: !!svg,
    soldAboveS: above("sold"), totalAboveS: above("total"),
  };
})`

type matrixRowShown struct {
	Mode, Fault, Label, Expected, Verdict, Oversold, Linearizable string
	Chart, SoldAboveS, TotalAboveS                                bool
}

// checkMatrixPage opens the -report page in a real browser: seventeen rows, each
// with its verdict and a chart, where none and local sell past the stock
// and the Redis lock never does.
func checkMatrixPage(t *testing.T, path string) {
	t.Helper()
	b := browsertest.Start(t, 1500, 1100)
	b.Navigate("file://" + path)
	b.WaitTrue(`document.querySelectorAll("#matrix tr.row").length > 0`, 10*time.Second, func() string { return "no rows" })
	if v := browsertest.Eval[string](b, `document.getElementById("verdict").textContent`); v != passLine {
		t.Errorf("verdict: got %q", v)
	}
	rows := browsertest.Eval[[]matrixRowShown](b, rowsJS)
	want := []struct{ mode, fault, oversold string }{
		{"redis", "", "no"}, {"redis", "", "no"}, {"local", "", "YES"}, {"none", "", "YES"},
		{"redis", "lease expiry", "no"}, {"redis", "lease expiry, no fence", "YES"},
		{"redis", "link cut", "no"}, {"redis", "link cut, no fence", "YES"},
		{"redis", "clock jump", "no"}, {"redis", "clock jump, no fence", "YES"},
		{"redis", "lease expiry", "no"}, {"redis", "lease expiry, no fence", "YES"},
		{"redis", "Redis restarted", "no"}, {"redis", "Redis restarted, no fence", "YES"},
		{"redis", "replica killed", "no"}, {"redis", "replica killed, no fence", "YES"},
		{"redis", "Redis restarted", "no"},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows on the page, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		name := fmt.Sprintf("row %d (%s %s)", i+1, r.Mode, r.Fault)
		if skippedHere(w.fault) {
			if r.Fault != w.fault || r.Verdict != "skipped" {
				t.Errorf("%s: got %+v, want fault %q skipped on %s", name, r, w.fault, runtime.GOOS)
			}
			continue
		}
		if r.Mode != w.mode || r.Fault != w.fault || r.Oversold != w.oversold || r.Verdict != "ok" || !r.Chart {
			t.Errorf("%s: got %+v, want mode %s, fault %q, oversold %s, verdict ok and a chart", name, r, w.mode, w.fault, w.oversold)
		}
		// An oversell shows as sold past S when the burst sells out, and
		// as stock + sold past S (lost stock updates) either way.
		switch {
		case (r.Mode == "none" || r.Mode == "local") && !r.SoldAboveS && !r.TotalAboveS:
			t.Errorf("%s: the chart draws neither sold nor stock + sold above S", name)
		case r.Mode == "redis" && !strings.Contains(r.Fault, "no fence") && (r.SoldAboveS || r.TotalAboveS):
			t.Errorf("%s: the chart draws sold or stock + sold above S under the Redis lock", name)
		}
		if w.oversold == "no" && r.Linearizable != "yes" {
			t.Errorf("%s: linearizable %q, want yes", name, r.Linearizable)
		}
	}
	b.Screenshot(browsertest.ScreenshotPath(t, "matrix-report.png"))
}
