package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/demo"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// The demo's main job, on both kinds of Redis: two replicas under the
// distributed lock sell exactly the stock, and everything is gone after.
func TestDemoPasses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	for _, tt := range []struct {
		redis, want string
	}{
		{"embedded", "demo: Redis: embedded Redis (miniredis) on 127.0.0.1:"},
		{"server", "demo: Redis: redis-server on 127.0.0.1:"},
	} {
		t.Run(tt.redis, func(t *testing.T) {
			t.Parallel()
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": tt.redis}, args()...)
			if r.code != 0 {
				t.Errorf("exit status: got %d, want 0", r.code)
			}
			for _, want := range []string{tt.want, "2 replica(s)", "lock redis (TTL 10s, renewal on, fencing on), up to 64 purchases per lock hold",
				"burst of 1000 buyers at once",
				"PASS (3) stock + sold == S", "demo: PASS: every safety invariant held"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			assertCleanedUp(t, r)
		})
	}
}

// The control group: without a lock, the burst oversells and the demo says
// so, with the exit status CI reads: 1 plainly, 0 when the oversell is
// what was expected. A 10 ms pause between each purchase's read and its
// write makes the overlap certain, however fast the replicas get through
// the burst without it.
func TestDemoDetectsOversell(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	for _, tt := range []struct {
		name    string
		extra   []string
		code    int
		verdict string
	}{
		{"plain", nil, 1, "demo: FAIL: OVERSOLD"},
		{"expected", []string{"-expect-oversell"}, 0, "demo: PASS: oversell detected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runDemo(t, context.Background(), nil, nil, smallArgs(append([]string{"-lock", "none", "-chaos-pause", "10ms"}, tt.extra...)...)...)
			if r.code != tt.code {
				t.Errorf("exit status: got %d, want %d", r.code, tt.code)
			}
			for _, want := range []string{"demo: no Redis", "FAIL (3) stock + sold == S", tt.verdict} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			assertCleanedUp(t, r)
		})
	}
}

// A sale with the lease-expiry fault (renewal off, a chaos pause longer
// than the lease) must show it: lost leases. When it does not (here a
// pause so unlikely that no holder takes it), the sale runs again on fresh
// replicas, 3 sales in all, and then the demo says "fault not injected"
// and fails, even though nothing was oversold. That sale's lease is long
// (10 s): with a short one, a critical section slowed past it by a loaded
// machine would lose a lease without the pause.
func TestDemoLeaseExpiryShowsItsFault(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	fault := []string{"-buyers", "40", "-stock", "5", "-lock-renew=false"}
	for _, tt := range []struct {
		prob, ttl, pause string
		code             int
		want             string
	}{
		{"1", "200ms", "300ms", 0, "demo: PASS"},
		{"1e-12", "10s", "11s", 1, "demo: FAULT NOT INJECTED in 3 sales: holders pause 11s with probability 1e-12, past the 10s lease with renewal off, yet no lease was lost"},
	} {
		t.Run("prob="+tt.prob, func(t *testing.T) {
			t.Parallel()
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"},
				append(fault, "-lock-ttl", tt.ttl, "-chaos-pause", tt.pause, "-chaos-prob", tt.prob)...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.want) {
				t.Errorf("got exit %d, want %d with %q:\n%s", r.code, tt.code, tt.want, r.stdout)
			}
			if n, want := strings.Count(r.stdout, "running the sale again"), 2*tt.code; n != want {
				t.Errorf("the sale ran again %d times, want %d", n, want)
			}
			m := regexp.MustCompile(`counted (\d+) fence rejection\(s\) and (\d+) lost lease\(s\)`).FindStringSubmatch(r.stdout)
			switch {
			case m == nil:
				t.Error("stdout lacks the replicas' counts")
			case tt.code == 0 && (m[2] == "0" || strings.Contains(r.stdout, "FAULT NOT INJECTED")):
				t.Errorf("every holder paused past its lease, yet %s leases lost", m[2])
			case tt.code != 0 && m[2] != "0":
				t.Errorf("%s leases lost with the pause never taken", m[2])
			}
			assertCleanedUp(t, r)
		})
	}
}

// A broken mode's sale that oversells nothing proves nothing, so it runs
// again on fresh replicas, 3 sales in all, before the demo fails. The
// local lock on one replica is the sale where the race cannot happen: its
// one mutex excludes every buyer.
func TestDemoExpectedOversellRunsAgainUntilItHappens(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: three demo sales")
	}
	r := runDemo(t, context.Background(), nil, nil, smallArgs("-lock", "local", "-replicas", "1", "-expect-oversell")...)
	const want = "demo: FAULT NOT INJECTED in 3 sales: no oversell and no violation in a sale of a mode expected to oversell"
	if r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Errorf("got exit %d, want 1 with %q", r.code, want)
	}
	if n := strings.Count(r.stdout, "running the sale again on fresh replicas"); n != 2 {
		t.Errorf("the sale ran again %d times, want 2", n)
	}
	if n := len(dirRE.FindAllString(r.stdout, -1)); n != 3 {
		t.Errorf("%d sales' databases printed, want 3 (each sale on fresh replicas)", n)
	}
	assertCleanedUp(t, r)
}

// With reads and restocks mixed in (at most 8 requests in flight), the
// linearizability check judges every answer: yes under the Redis lock, NO
// under the local lock of two replicas, whose lost updates show in the
// reads. The restocks are paced by count, one per 50 answers, so that the
// sale has them however fast it goes; under the local lock a 5 ms pause
// between each purchase's read and its write makes the two replicas'
// critical sections overlap for certain.
func TestDemoMixedSaleIsChecked(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	mixed := []string{"-buyers", "600", "-stock", "50", "-mix", "reads=10%,restocks=2%"}
	for _, tt := range []struct {
		lock, want, verdict string
	}{
		{"redis", "linearizable: yes (", "demo: PASS: every safety invariant held, nothing oversold, the history is linearizable"},
		{"local", "linearizable: NO (product 1: starting from stock 50", "demo: PASS"},
	} {
		t.Run(tt.lock, func(t *testing.T) {
			t.Parallel()
			extra := []string{"-lock", tt.lock}
			if tt.lock != "redis" {
				extra = append(extra, "-expect-oversell", "-chaos-pause", "5ms")
			}
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"}, append(mixed, extra...)...)
			if r.code != 0 {
				t.Errorf("exit status: got %d, want 0", r.code)
			}
			wants := []string{"mixed in: reads=10%,restocks=2%, at most 8 requests in flight", tt.want, tt.verdict}
			if tt.lock == "local" {
				wants = append(wants, "demo: the replicas run as processes of their own (pids ")
			}
			for _, want := range wants {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			// One restock falls due per 50 of the 600 answers: 1 to 12.
			if m := restocksRE.FindStringSubmatch(r.stdout); m == nil {
				t.Errorf("stdout does not say how many restocks ran")
			} else if n, _ := strconv.Atoi(m[1]); n < 1 || n > 12 {
				t.Errorf("fault not injected: %d restocks ran, want 1 to 12 (one per 50 answers)", n)
			}
			if m := vizRE.FindStringSubmatch(r.stdout); tt.lock != "redis" {
				if m == nil {
					t.Errorf("stdout names no visualization of the violation")
				} else if _, err := os.Stat(m[1]); err != nil {
					t.Errorf("visualization %s: %v", m[1], err)
				}
			}
			assertCleanedUp(t, r)
		})
	}
}

var (
	vizRE      = regexp.MustCompile(`porcupine's visualization of product \d+: (\S+)`)
	restocksRE = regexp.MustCompile(`and \d+ reads and (\d+) restocks mixed in`)
)

// A Ctrl-C (here: the context ending, which is what the signal does) stops
// the sale early, with purchases in flight and holding the lock; the demo
// still reads the sale back and judges it, then stops the replicas and
// redis-server and removes the directory.
func TestDemoCleansUpWhenInterrupted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := regexp.MustCompile(`s +sent [1-9]`) // the first progress line, a second in
	stdout := &syncBuffer{onWrite: func(s string) {
		if progress.MatchString(s) {
			cancel()
		}
	}}
	r := runDemo(t, ctx, stdout, map[string]string{"SECKILL_DEMO_REDIS": "server"},
		"-duration", "1m", "-rate", "100", "-chaos-pause", "20ms")
	if r.took > 30*time.Second {
		t.Errorf("the demo took %v after the interrupt, want it to stop the one-minute sale early", r.took)
	}
	for _, want := range []string{"stopped early: interrupted", "demo: PASS"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	assertCleanedUp(t, r)
}

// "seckill demo | head": once the reader has gone, a write fails with
// EPIPE (the process ignores SIGPIPE, which its replicas' sockets raise
// too), and that stops the sale as a Ctrl-C does, and cleans up.
func TestDemoStopsWhenItsOutputIsCut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	out := &cutPipe{}
	var stderr syncBuffer
	start := time.Now()
	code := demo.Command(replica)(context.Background(), []string{"-duration", "1m", "-rate", "100"},
		func(k string) string { return map[string]string{"SECKILL_DEMO_REDIS": "server"}[k] }, out, &stderr)
	r := run{code: code, stdout: out.String(), stderr: stderr.String(), took: time.Since(start)}
	t.Logf("exit %d after %v; stdout until the cut:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	if !firstProgress.MatchString(r.stdout) {
		t.Fatal("the output was never cut: no progress line")
	}
	if r.took > 30*time.Second {
		t.Errorf("the demo took %v with its output cut, want it to stop the one-minute sale early", r.took)
	}
	if r.code != 2 {
		t.Errorf("exit status: got %d, want 2 (interrupted)", r.code)
	}
	assertCleanedUp(t, r)
}

// cutPipe records what is written until the first progress line, and
// then fails every write with EPIPE, as a pipe whose reader has exited.
type cutPipe struct {
	syncBuffer
	cut atomic.Bool
}

var firstProgress = regexp.MustCompile(`s +sent [1-9]`)

func (p *cutPipe) Write(b []byte) (int, error) {
	if p.cut.Load() {
		return 0, syscall.EPIPE
	}
	n, err := p.syncBuffer.Write(b)
	if firstProgress.MatchString(p.syncBuffer.String()) {
		p.cut.Store(true)
	}
	return n, err
}

// An error after everything has started (the results file cannot be
// created) is exit status 2, and still cleans up.
func TestDemoCleansUpAfterError(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	out := filepath.Join(t.TempDir(), "missing", "results.bin")
	r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"}, args("-out", out)...)
	if r.code != 2 {
		t.Errorf("exit status: got %d, want 2", r.code)
	}
	if !strings.Contains(r.stderr, "results.bin") {
		t.Errorf("stderr does not name the file that could not be written")
	}
	assertCleanedUp(t, r)
}

// Usage errors are exit status 2 before anything starts; -h is not an
// error.
func TestDemoUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "Usage: seckill demo"},
		{[]string{"-matrix", "-lock", "none"}, 2, "-matrix chooses these per row; drop -lock"},
		{[]string{"-replicas", "0"}, 2, "-replicas 0: want 1..16"},
		{[]string{"-redis", "cloud"}, 2, `-redis "cloud": want auto, server or embedded`},
		{[]string{"-lock", "mutex"}, 2, `lock mode "mutex"`},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-buyers", "10", "-rate", "5"}, 2, "choose one"},
		{[]string{"-batch-max", "0"}, 2, "batch max 0"},
		{[]string{"-mix", "reads=200%"}, 2, "-mix"},
		{[]string{"-matrix", "-keep"}, 2, "-keep: the matrix stops each row's replicas"},
		{[]string{"-rows", "reservations"}, 2, "-rows picks rows of -matrix: give -matrix too"},
		{[]string{"-matrix", "-rows", "some"}, 2, `-rows "some": want default, reservations or all`},
		{[]string{"-unsafe-pay-late"}, 2, "act on reservations: give -window too"},
		{[]string{"-window", "1s", "-pay", "0.9", "-cancel", "0.2"}, 2, "together at most 1"},
		{[]string{"-window", "1s", "-unsafe-expiry", "sideways"}, 2, `unsafe expiry "sideways"`},
		{[]string{"-matrix", "-window", "1s"}, 2, "-matrix chooses these per row; drop -window"},
		{[]string{"-design", "redis-counter-async", "-window", "1s"}, 2, "redis-counter-async answers 201 before the order exists"},
	} {
		r := runDemo(t, context.Background(), nil, nil, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("demo %v: got exit %d and stderr %q, want exit %d and %q", tt.args, r.code, r.stderr, tt.code, tt.want)
		}
	}
}

// demo -report and -report-json pass through to the sale: the page says
// what the text says, and the JSON reads back.
func TestDemoReport(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	dir := t.TempDir()
	page, data := filepath.Join(dir, "sale.html"), filepath.Join(dir, "sale.json")
	r := runDemo(t, context.Background(), nil, nil, smallArgs("-lock", "none", "-chaos-pause", "10ms", "-expect-oversell", "-report", page, "-report-json", data)...)
	if r.code != 0 {
		t.Fatalf("exit status: got %d, want 0", r.code)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<div class="verdict pass" id="verdict">PASS: oversell detected, as expected for this mode</div>`,
		`data-number="3" data-status="FAIL"`, `<svg class="sale-chart"`,
		`<dd id="shape">burst of 200 buyers at once`, `id="linearizable" data-verdict="`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report page lacks %q", want)
		}
	}
	j, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Oversold, ExpectOversell bool
		Requests                 int
		Shape                    string
		Linearizability          struct{ Verdict string }
	}
	if err := json.Unmarshal(j, &rep); err != nil || !rep.Oversold || !rep.ExpectOversell || rep.Requests != 200 ||
		!strings.HasPrefix(rep.Shape, "burst of 200 buyers") || rep.Linearizability.Verdict == "" {
		t.Errorf("report JSON: got %+v (%v), want an expected oversell of 200 requests, the burst and a linearizability verdict", rep, err)
	}
	if !strings.Contains(r.stdout, "demo: dashboard: http://127.0.0.1:") {
		t.Error("the demo did not print the dashboard's URL")
	}
}

// demo -keep keeps the replicas serving after the sale until Ctrl-C (here:
// the context ending): the printed dashboard answers with the page, and
// its data with the sold-out product from the shared database and, once
// the replicas have written the sale's seconds, its 50 purchases. Then
// the demo cleans up as usual and exits with the sale's verdict.
func TestDemoKeepServesTheDashboard(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keepRE := regexp.MustCompile(`the dashboard is at (http://127\.0\.0\.1:\d+)/dashboard; Ctrl-C to stop`)
	type dashboardData struct {
		Top       []struct{ Stock, Sold int64 }
		Inventory struct{ Products, Stock, Sold, SoldOut int64 }
		Totals    struct{ Outcomes map[string]int64 }
	}
	type seen struct {
		page string
		data dashboardData
		err  error
	}
	got := make(chan seen, 1)
	var once sync.Once
	stdout := &syncBuffer{onWrite: func(s string) {
		m := keepRE.FindStringSubmatch(s)
		if m == nil {
			return
		}
		once.Do(func() {
			go func() {
				defer cancel()
				var v seen
				defer func() { got <- v }()
				page, err := httpGet(m[1] + "/dashboard")
				if v.page, v.err = string(page), err; err != nil {
					return
				}
				// The seconds reach Redis once a second: poll until the
				// sale's purchases are in, or a deadline.
				pctx, pcancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer pcancel()
				err = poll.Until(pctx, 100*time.Millisecond, func() (bool, error) {
					b, err := httpGet(m[1] + "/dashboard/data")
					if err != nil {
						return false, err
					}
					v.data = dashboardData{}
					if err := json.Unmarshal(b, &v.data); err != nil {
						return false, err
					}
					return v.data.Totals.Outcomes["created"] >= 50, nil
				})
				if !errors.Is(err, poll.ErrTimeout) {
					v.err = err
				}
			}()
		})
	}}
	r := runDemo(t, ctx, stdout, map[string]string{"SECKILL_DEMO_REDIS": "embedded"}, smallArgs("-keep")...)
	if r.code != 0 {
		t.Errorf("exit status: got %d, want 0 (the sale's verdict)", r.code)
	}
	select {
	case v := <-got:
		if v.err != nil {
			t.Fatalf("dashboard: %v", v.err)
		}
		if !strings.Contains(v.page, "<title>seckill: live sale</title>") {
			t.Errorf("GET /dashboard is not the dashboard page: %.200q", v.page)
		}
		if p, inv := v.data.Top, v.data.Inventory; len(p) != 1 || p[0].Stock != 0 || p[0].Sold != 50 || inv.Products != 1 || inv.Sold != 50 {
			t.Errorf("dashboard data: got top %+v, inventory %+v; want the one product, sold out: stock 0, sold 50", p, inv)
		}
		if n := v.data.Totals.Outcomes["created"]; n != 50 {
			t.Errorf("dashboard data: got %d purchases created over the seconds, want 50", n)
		}
	default:
		t.Fatal("the demo did not print the kept dashboard's URL")
	}
	assertCleanedUp(t, r)
}

// httpGet reads url's body, failing on any status but 200. It keeps no
// connection open, so no client goroutine outlives the test.
func httpGet(url string) ([]byte, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

// Every design without a lock passes the demo's checks, none of them being
// a broken control: the invariants and linearizability, with reads and
// restocks (paced by count) mixed in so that the check sees the state
// between purchases.
// The counter designs run on the embedded Redis, which must run their
// scripts and the order queue as redis-server does; the async design's
// check waits for its orders.
func TestDemoDesignsPass(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a whole demo run per design")
	}
	for _, tt := range []struct {
		design string
		wants  []string
	}{
		{"conditional", []string{"demo: no Redis: design conditional does not use it", "design conditional: one transaction per purchase"}},
		{"redis-counter", []string{"demo: Redis: embedded Redis (miniredis)", "design redis-counter: a Lua script",
			"demo: the replicas built 1 stock counter(s) from the database"}},
		{"redis-counter-async", []string{"demo: Redis: embedded Redis (miniredis)", "design redis-counter-async: a Lua script",
			"(of up to 10s), the orders number the sold count"}},
	} {
		t.Run(tt.design, func(t *testing.T) {
			t.Parallel()
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "embedded"},
				"-design", tt.design, "-buyers", "600", "-stock", "50", "-mix", "reads=10%,restocks=2%")
			if r.code != 0 {
				t.Errorf("exit status: got %d, want 0", r.code)
			}
			for _, want := range append(tt.wants, "linearizable: yes (",
				"demo: PASS: every safety invariant held, nothing oversold, the history is linearizable") {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			// The restocks are what make a read or a sold-out answer
			// wrong: the check must have had some (one per 50 answers).
			if m := restocksRE.FindStringSubmatch(r.stdout); m == nil || m[1] == "0" {
				t.Errorf("no restock ran: %v", m)
			}
			assertCleanedUp(t, r)
		})
	}
}
