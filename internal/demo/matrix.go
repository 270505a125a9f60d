package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// maxRowAttempts bounds the sales of one row. A sale in which the row's
// fault did not happen (in a control row: the race that makes it
// oversell) shows nothing, so the row runs again on fresh replicas; after
// this many sales in all, it is reported as "fault not injected".
const maxRowAttempts = 3

// row is one sale of the matrix and what it must show.
type row struct {
	mode     app.LockMode
	batchMax int      // 0: the default
	label    string   // in the verdict, beside the fault
	fault    string   // "" for none
	expired  bool     // the lease-expiry fault
	unsafe   bool     // fencing off
	oversell bool     // expected
	why      string   // the verdict's explanation when the row is as expected
	net      netFault // a network fault on replica 1 (netfaults.go); "" for none
	// products, for the rows over many products (matrix_products.go), is
	// how many the sale sells (0: the sale's own), and pfault their fault
	// beside lease expiry.
	products int
	pfault   productsFault
	// design, for the rows of the designs (matrix_designs.go): the
	// design, its fault and the outcome it must show.
	design *designRow
}

// matrixRows are the rows, the correct configurations next to the broken
// ones that prove the checker catches an oversell. local is broken only
// with several replicas: one replica's mutex excludes all its buyers.
func matrixRows(replicas int) []row {
	local := row{mode: app.LockLocal, oversell: true, why: "an in-process mutex does not exclude the other replica"}
	if replicas == 1 {
		local.oversell, local.why = false, "with one replica, its mutex excludes every buyer"
	}
	return []row{
		{mode: app.LockRedis, why: "the distributed lock excludes every replica's buyers"},
		{mode: app.LockRedis, batchMax: 1, label: "one at a time", why: "one buyer per lock hold excludes the same way"},
		local,
		{mode: app.LockNone, oversell: true, why: "nothing excludes anyone"},
		{mode: app.LockRedis, fault: "lease expiry", expired: true,
			why: "leases ran out mid-purchase, and the fence refused the late writes"},
		{mode: app.LockRedis, fault: "lease expiry, no fence", expired: true, unsafe: true, oversell: true,
			why: "without the fence the late writes land: the fence is what saves the row above"},
		{mode: app.LockRedis, fault: string(faultLinkCut), net: faultLinkCut,
			why: "replica 1, cut off from Redis, lost its lease while another replica took the lock, and the fence refused its write"},
		{mode: app.LockRedis, fault: string(faultLinkCut) + ", no fence", net: faultLinkCut, unsafe: true, oversell: true,
			why: "without the fence the cut-off holder's write lands on what the others sold"},
		{mode: app.LockRedis, label: "redlock", fault: string(faultClockJump), net: faultClockJump,
			why: "two replicas each held a majority of the nodes, and the fence refused the older one's write"},
		{mode: app.LockRedis, label: "redlock", fault: string(faultClockJump) + ", no fence", net: faultClockJump, unsafe: true, oversell: true,
			why: "without the fence the older majority's write lands on what the newer one sold"},
	}
}

// replicas is how many replicas r's sale runs on: a network fault needs
// a replica besides the one it touches; a restart or a kill over many
// products runs on two.
func (r row) replicas(o options) int {
	switch {
	case r.pfault != noProductsFault:
		return 2
	case r.net != "":
		return max(o.replicas, 2)
	}
	return o.replicas
}

// productCount is how many products r's sale sells.
func (r row) productCount(o options) int {
	if r.products > 0 {
		return r.products
	}
	return max(o.sale.Products, 1)
}

// config is the replicas' configuration for r, and the fault hook it
// runs, if any.
func (r row) config(o options, redisAddr string) (app.Config, *stallHook) {
	cfg := app.DefaultConfig()
	cfg.Lock = r.mode
	cfg.LockWait = o.svc.LockWait
	cfg.RedisAddr = redisAddr
	cfg.AdminToken = rand.Text()
	cfg.UnsafeNoFence = r.unsafe
	if r.batchMax > 0 {
		cfg.BatchMax = r.batchMax
	}
	var hook *stallHook
	if r.expired {
		hook = newStallHook(faultWork, faultMaxStall, faultProb)
		cfg.LockTTL, cfg.LockRenew = faultTTL, false
		cfg.Chaos = hook.run
	}
	return cfg, hook
}

// batchText is the batch column: how many purchases one lock hold may
// serve. The unfenced modes always sell one at a time; the designs without
// a lock have no batch.
func (r row) batchText() string {
	if r.rowDesign() != app.DesignLock {
		return "-"
	}
	if r.mode != app.LockRedis || r.unsafe {
		return "1"
	}
	if r.batchMax > 0 {
		return fmt.Sprint(r.batchMax)
	}
	return fmt.Sprint(app.DefaultBatchMax)
}

// result is what one row's sale gave.
type result struct {
	row
	ran                      bool
	skip                     string // why the row did not run, when it could not here
	injected                 string // a network fault's evidence; "" if it did not happen
	notInjected              string // then, what is missing
	rep                      loadtest.Report
	err                      error
	fenceRejected, leaseLost int64
	// overlaps counts the stalled holders that saw the next holder get in
	// (the fault rows' hook).
	overlaps int64
	// attempt is this sale's number among the row's; earlier says why
	// each sale before it was run again.
	attempt int
	earlier []string
	dev     designEvidence   // a design row's evidence of its fault
	pev     productsEvidence // a restart or kill row's over many products
	output  bytes.Buffer     // the sale's full report, shown if the row fails
}

// linText is the row's linearizable column.
func (r *result) linText() string {
	if v := r.rep.Linearizability.Verdict; v != loadtest.LinNotChecked {
		return string(v)
	}
	return "-"
}

// runMatrix runs every row on one Redis, each on fresh replicas with a
// fresh database, and prints the table and a verdict per row. It returns
// exitOK only if every row matched its expectation, exitError if a row
// could not run (or a Ctrl-C stopped the matrix), and exitFail otherwise.
func runMatrix(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, stdout, stderr io.Writer) int {
	rows := selectRows(o)
	if err := createMatrixReports(o); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "demo -matrix: %d sales of %d items, each a %s, on %d fresh replica(s) with Redis from %s\n",
		len(rows), o.sale.Stock, loadText(o, rows), o.replicas, rds.describe())
	results := make([]*result, len(rows))
	for i, r := range rows {
		results[i] = &result{row: r, attempt: 1}
		for ctx.Err() == nil {
			res := results[i]
			fmt.Fprintf(stdout, "  [%d/%d] %-19s batch %-4s %-32s ", i+1, len(rows), r.designName(), r.batchText(), r.fault)
			start := time.Now()
			runRow(ctx, o, rds, logger, res)
			fmt.Fprintf(stdout, "%s (%.1fs)\n", res.status(), time.Since(start).Seconds())
			if res.err != nil {
				fmt.Fprintf(stderr, "demo: %s %s: %v\n", r.designName(), r.fault, res.err)
			}
			if !res.rerun() {
				break
			}
			_, missing := res.judge()
			results[i] = &result{row: r, attempt: res.attempt + 1,
				earlier: append(res.earlier, fmt.Sprintf("sale %d: %s", res.attempt, missing))}
		}
	}
	fmt.Fprintln(stdout)
	writeTable(stdout, o, results)
	fmt.Fprintln(stdout)
	code := writeVerdicts(stdout, results, ctx.Err() != nil)
	if err := writeMatrixReports(o, results); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		code = exitError
	}
	return code
}

// selectRows are the rows -rows and -design pick: the default rows
// (every lock mode's, the rows over many products and the designs'), the
// reservation rows (the designs' and the lock design's, under the faults
// of an order's expiry), or all of them; with -design, only that design's.
func selectRows(o options) []row {
	var rows []row
	if o.rows != rowsReservations {
		rows = append(matrixRows(o.replicas), productsRows()...)
		rows = append(rows, designRows()...)
	}
	switch o.rows {
	case rowsReservations:
		rows = slices.DeleteFunc(designRows(), func(r row) bool { return !r.design.fault.life() })
		rows = append(rows, lockLifeRows()...)
	case rowsAll:
		rows = append(rows, lockLifeRows()...)
	}
	if o.designSet {
		rows = slices.DeleteFunc(rows, func(r row) bool { return r.rowDesign() != o.svc.Design })
	}
	return rows
}

// name is the row's name in the verdicts: the mode, the fault and the
// label.
func (r *result) name() string {
	name := r.designName()
	if r.fault != "" {
		name += " (" + r.fault + ")"
	}
	if r.label != "" {
		name += " (" + r.label + ")"
	}
	return name
}

// earlierText says which sales of the row ran before this one, and why
// each was run again; "" for the first.
func (r *result) earlierText() string {
	if len(r.earlier) == 0 {
		return ""
	}
	return fmt.Sprintf(" (sale %d of at most %d; %s)", r.attempt, maxRowAttempts, strings.Join(r.earlier, "; "))
}

// status is one sale's line in the progress: its outcome, and whether
// the row runs again.
func (r *result) status() string {
	switch {
	case r.skip != "":
		return "skipped: " + r.skip
	case r.err != nil:
		return "error"
	case !r.ran:
		return "interrupted"
	}
	s := "oversold: no"
	if r.rep.Oversold {
		s = "oversold: YES"
	}
	s += ", linearizable: " + r.linText()
	if r.expired || r.net != "" || r.pfault != noProductsFault {
		s += fmt.Sprintf(", leases lost: %d, fence rejected: %d", r.leaseLost, r.fenceRejected)
	}
	if r.attempt > 1 {
		s += fmt.Sprintf(", sale %d of at most %d", r.attempt, maxRowAttempts)
	}
	if v, missing := r.judge(); v == verdictNoFault {
		s += "; fault not injected (" + missing + ")"
		if r.rerun() {
			s += ": running it again"
		}
	}
	return s
}

// runRow runs one sale into res.
func runRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	if res.design != nil {
		runDesignRow(ctx, o, rds, logger, res)
		return
	}
	if res.net != "" {
		runNetRow(ctx, o, rds, logger, res)
		return
	}
	if res.pfault != noProductsFault {
		runProductsRow(ctx, o, rds, logger, res)
		return
	}
	cfg, hook := res.config(o, rds.addr)
	c, err := startCluster(ctx, o.replicas, cfg, o.command, logger.With("mode", res.mode, "fault", res.fault))
	if err != nil {
		res.err = err
		return
	}
	sale := o.sale
	if res.products > 0 {
		sale = res.productsSale(o)
	}
	sale.Targets, sale.AdminToken = c.urls, cfg.AdminToken
	sale.ProgressMode = loadtest.ProgressOff
	sale.Report, sale.ReportJSON = "", "" // the matrix writes one report of all rows
	sale.NoVisualization = true           // one per broken row would only clutter the temporary directory
	res.rep, res.err = loadtest.Run(ctx, sale, &res.output)
	res.ran = ctx.Err() == nil
	res.fenceRejected, res.leaseLost = c.counters()
	if hook != nil {
		res.overlaps = hook.overlapCount()
	}
	if err := c.Close(); err != nil && res.err == nil {
		res.err = fmt.Errorf("clean up: %w", err)
	}
}

// writeTable prints the matrix: one line per row, then what the columns
// and the fault mean.
func writeTable(w io.Writer, o options, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tbatch\treplicas\tproducts\tfault\torders\tstock left\toversold\tlinearizable\tpurchases/s\trequests/s\tp99\tfence rejected\tleases lost")
	for _, r := range results {
		fault := r.fault
		if fault == "" {
			fault = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t", r.designName(), r.batchText(), r.replicas(o), r.productCount(o), fault)
		switch {
		case r.skip != "":
			fmt.Fprintln(tw, "skipped: "+r.skip)
		case !r.ran && r.err == nil:
			fmt.Fprintln(tw, "not run")
		case r.err != nil:
			fmt.Fprintln(tw, "error")
		default:
			oversold := "no"
			if r.rep.Oversold {
				oversold = "YES"
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.0f\t%.0f\t%v\t%d\t%d\n", r.rep.RunOrders, r.rep.After.Stock, oversold, r.linText(),
				r.rep.PurchaseRate, r.rep.RequestRate, roundDuration(r.rep.Latency.P99), r.fenceRejected, r.leaseLost)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nstock: %d per product, load: %s, nothing injected but the fault column.\n"+
		"oversold: a safety invariant of the load test failed (stock left + orders = stock, stock >= 0, one order per 201\n"+
		"and per user). linearizable: the sale's history checked against a model of the API (porcupine); NO when no\n"+
		"order of the requests explains their answers. batch: purchases per lock hold. purchases/s: while selling;\n"+
		"requests/s and p99: all requests.\n"+
		"lease expiry: lock TTL %v, renewal off, holders work %v; the first, and %.0f%% of the others, then stall until\n"+
		"the next holder is in (their lease ran out mid-purchase), %v at most. A sale without lost leases (or, fenced,\n"+
		"without a late write refused) runs again, %d sales at most, else: fault not injected.\n"+
		"fence rejected: late writes the database refused (a token older than the current holder's).\n%s\n%s\n",
		o.sale.Stock, loadText(o, rowsOf(results)), faultTTL, faultWork, faultProb*100, faultMaxStall, maxRowAttempts, netLegend(), productsLegend())
	writeDesignLegend(w, results)
	writeLockLifeLegend(w, results)
}

// writeVerdicts prints one line per row and the overall one, then the full
// report of each row that did not match, and returns the exit status.
func writeVerdicts(w io.Writer, results []*result, interrupted bool) int {
	bad, errs := 0, 0
	for _, r := range results {
		v, why := r.judge()
		name := r.name()
		switch v {
		case verdictSkipped:
			fmt.Fprintf(w, "SKIPPED  %s: %s\n", name, why)
		case verdictError:
			errs++
			fmt.Fprintf(w, "ERROR    %s: %s\n", name, why)
		case verdictOK:
			what := "did not oversell and is linearizable"
			switch {
			case r.design != nil:
				what = r.design.outcomeText()
			case r.oversell:
				what = "oversold"
			}
			fmt.Fprintf(w, "ok       %s %s, as expected: %s%s\n", name, what, why, r.earlierText())
		case verdictNoFault:
			bad++
			sales := append(r.earlier[:len(r.earlier):len(r.earlier)], fmt.Sprintf("sale %d: %s", r.attempt, why))
			fmt.Fprintf(w, "FAULT NOT INJECTED %s in %d sales (%s): the row shows nothing\n", name, r.attempt, strings.Join(sales, "; "))
		default:
			bad++
			fmt.Fprintf(w, "MISMATCH %s %s%s\n", name, why, r.earlierText())
		}
	}
	for _, r := range results {
		if v, _ := r.judge(); r.ran && v != verdictOK {
			fmt.Fprintf(w, "\nReport of %s %s:\n%s", r.designName(), r.fault, r.output.String())
		}
	}
	switch {
	case interrupted:
		fmt.Fprintln(w, "\nmatrix: interrupted")
		return exitError
	case errs > 0:
		fmt.Fprintf(w, "\nmatrix: %d of %d rows could not run\n", errs, len(results))
		return exitError
	case bad > 0:
		fmt.Fprintf(w, "\nmatrix: FAIL: %d of %d rows not as expected\n", bad, len(results))
		return exitFail
	}
	fmt.Fprintf(w, "\nmatrix: %s\n", passLine(results))
	return exitOK
}

// passLine is the overall verdict of a matrix whose rows were all as
// expected, or skipped: a row that needs what this machine lacks (a
// redis-server of its own) says so, and does not fail the matrix.
func passLine(results []*result) string {
	skipped := 0
	for _, r := range results {
		if v, _ := r.judge(); v == verdictSkipped {
			skipped++
		}
	}
	if skipped == 0 {
		return fmt.Sprintf("PASS: all %d rows as expected", len(results))
	}
	return fmt.Sprintf("PASS: all %d rows that ran as expected, %d skipped", len(results)-skipped, skipped)
}

// loadText is the rows' sale in words: the load test's, or when every row
// is a reservation row, which drives its own sale, that sale.
func loadText(o options, rows []row) string {
	if slices.ContainsFunc(rows, func(r row) bool { return r.design == nil || !r.design.fault.life() }) {
		return shapeText(o.sale)
	}
	return fmt.Sprintf("reservation sale with a %v payment window (matrix_life.go)", lifeWindow)
}

// rowsOf is the rows of results.
func rowsOf(results []*result) []row {
	rows := make([]row, len(results))
	for i, r := range results {
		rows[i] = r.row
	}
	return rows
}

// shapeText is the sale's load in words, as the load test reports it.
func shapeText(sale loadtest.Config) string {
	if sale.Buyers > 0 {
		if sale.BurstWindow > 0 {
			return fmt.Sprintf("burst of %d buyers over %v", sale.Buyers, sale.BurstWindow)
		}
		return fmt.Sprintf("burst of %d buyers at once", sale.Buyers)
	}
	return fmt.Sprintf("steady %d req/s for %v", sale.Rate, sale.Duration)
}

// roundDuration keeps about three significant figures, enough to read.
func roundDuration(d time.Duration) time.Duration {
	for _, unit := range []time.Duration{time.Second, time.Millisecond, time.Microsecond} {
		if d >= unit {
			return d.Round(unit / 100)
		}
	}
	return d
}
