package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// The matrix's fault: holders outlive their leases. Every holder works 2 ms
// inside the critical section, and with probability 0.2 stalls 300 ms more:
// longer than the 200 ms TTL, with renewal off, so the lease ends
// mid-purchase and lets the next buyer in; the probability below 1 lets the
// sale move between stalls. The rows without a fault inject nothing: the
// burst alone is what makes the broken modes oversell.
const (
	faultWork  = 2 * time.Millisecond
	faultTTL   = 200 * time.Millisecond
	faultPause = 300 * time.Millisecond
	faultProb  = 0.2
)

// row is one sale of the matrix and what it must show.
type row struct {
	mode     app.LockMode
	batchMax int    // 0: the default
	label    string // in the verdict, beside the fault
	fault    string // "" for none
	expired  bool   // the lease-expiry fault
	unsafe   bool   // fencing off
	oversell bool   // expected
	why      string // the verdict's explanation when the row is as expected
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
	}
}

// config is the replicas' configuration for r.
func (r row) config(o options, redisAddr string) app.Config {
	cfg := app.DefaultConfig()
	cfg.Lock = r.mode
	cfg.LockWait = o.svc.LockWait
	cfg.RedisAddr = redisAddr
	cfg.AdminToken = rand.Text()
	cfg.UnsafeNoFence = r.unsafe
	if r.batchMax > 0 {
		cfg.BatchMax = r.batchMax
	}
	if r.expired {
		cfg.LockTTL, cfg.LockRenew = faultTTL, false
		cfg.Chaos = workHook(faultWork, faultPause, faultProb)
	}
	return cfg
}

// batchText is the batch column: how many purchases one lock hold may
// serve. The unfenced modes always sell one at a time.
func (r row) batchText() string {
	if r.mode != app.LockRedis || r.unsafe {
		return "1"
	}
	if r.batchMax > 0 {
		return fmt.Sprint(r.batchMax)
	}
	return fmt.Sprint(app.DefaultBatchMax)
}

// workHook is the matrix's chaos hook: every holder works for work, and
// with probability prob stalls for pause on top. It replaces the service's
// single pause because the fault rows need both. Like the service's own
// hook, it ends with the request.
func workHook(work, pause time.Duration, prob float64) func(context.Context) {
	return func(ctx context.Context) {
		d := work
		if pause > 0 && mrand.Float64() < prob {
			d += pause
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// result is what one row's sale gave.
type result struct {
	row
	ran                      bool
	rep                      loadtest.Report
	err                      error
	fenceRejected, leaseLost int64
	output                   bytes.Buffer // the sale's full report, shown if the row fails
}

// matched reports whether the row came out as expected: an oversell
// where one is expected; otherwise none, and a history checked
// linearizable (NO or unknown is not a pass).
func (r *result) matched() bool {
	if !r.ran || r.err != nil || r.rep.Oversold != r.oversell {
		return false
	}
	return r.oversell || r.rep.Linearizability.Verdict == loadtest.LinYes
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
	rows := matrixRows(o.replicas)
	fmt.Fprintf(stdout, "demo -matrix: %d sales of %d items, each a %s, on %d fresh replica(s) with Redis from %s\n",
		len(rows), o.sale.Stock, shapeText(o.sale), o.replicas, rds.describe())
	results := make([]*result, len(rows))
	for i, r := range rows {
		res := &result{row: r}
		results[i] = res
		if ctx.Err() != nil {
			continue
		}
		fmt.Fprintf(stdout, "  [%d/%d] %-5s batch %-4s %-24s ", i+1, len(rows), r.mode, r.batchText(), r.fault)
		start := time.Now()
		runRow(ctx, o, rds, logger, res)
		status := "oversold: no"
		switch {
		case res.err != nil:
			status = "error"
		case !res.ran:
			status = "interrupted"
		case res.rep.Oversold:
			status = "oversold: YES"
		}
		if res.err == nil && res.ran {
			status += ", linearizable: " + res.linText()
		}
		fmt.Fprintf(stdout, "%s (%.1fs)\n", status, time.Since(start).Seconds())
		if res.err != nil {
			fmt.Fprintf(stderr, "demo: %s %s: %v\n", r.mode, r.fault, res.err)
		}
	}
	fmt.Fprintln(stdout)
	writeTable(stdout, o, results)
	fmt.Fprintln(stdout)
	return writeVerdicts(stdout, results, ctx.Err() != nil)
}

// runRow runs one sale into res.
func runRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	cfg := res.config(o, rds.addr)
	c, err := startCluster(ctx, o.replicas, cfg, logger.With("mode", res.mode, "fault", res.fault))
	if err != nil {
		res.err = err
		return
	}
	sale := o.sale
	sale.Targets, sale.AdminToken = c.urls, cfg.AdminToken
	sale.ProgressMode = loadtest.ProgressOff
	sale.NoVisualization = true // one per broken row would only clutter the temporary directory
	res.rep, res.err = loadtest.Run(ctx, sale, &res.output)
	res.ran = ctx.Err() == nil
	res.fenceRejected, res.leaseLost = c.counters()
	if err := c.Close(); err != nil && res.err == nil {
		res.err = fmt.Errorf("clean up: %w", err)
	}
}

// writeTable prints the matrix: one line per row, then what the columns
// and the fault mean.
func writeTable(w io.Writer, o options, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tbatch\treplicas\tfault\torders\tstock left\toversold\tlinearizable\tpurchases/s\trequests/s\tp99\tfence rejected\tleases lost")
	for _, r := range results {
		fault := r.fault
		if fault == "" {
			fault = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t", r.mode, r.batchText(), o.replicas, fault)
		switch {
		case !r.ran && r.err == nil:
			fmt.Fprintln(tw, "not run")
		case r.err != nil:
			fmt.Fprintln(tw, "error")
		default:
			oversold := "no"
			if r.rep.Oversold {
				oversold = "YES"
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.0f\t%.0f\t%v\t%d\t%d\n", r.rep.After.Sold, r.rep.After.Stock, oversold, r.linText(),
				r.rep.PurchaseRate, r.rep.RequestRate, roundDuration(r.rep.Latency.P99), r.fenceRejected, r.leaseLost)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nstock: %d per sale, load: %s, nothing injected but the fault column.\n"+
		"oversold: a safety invariant of the load test failed (stock left + orders = stock, stock >= 0, one order per 201\n"+
		"and per user). linearizable: the sale's history checked against a model of the API (porcupine); NO when no\n"+
		"order of the requests explains their answers. batch: purchases per lock hold. purchases/s: while selling;\n"+
		"requests/s and p99: all requests.\n"+
		"lease expiry: lock TTL %v, renewal off, holders work %v and %.0f%% of them stall %v more, so their leases run\n"+
		"out mid-purchase. fence rejected: late writes the database refused (a token older than the current holder's).\n",
		o.sale.Stock, shapeText(o.sale), faultTTL, faultWork, faultProb*100, faultPause)
}

// writeVerdicts prints one line per row and the overall one, then the full
// report of each row that did not match, and returns the exit status.
func writeVerdicts(w io.Writer, results []*result, interrupted bool) int {
	bad, errs := 0, 0
	for _, r := range results {
		name := string(r.mode)
		if r.fault != "" {
			name += " (" + r.fault + ")"
		}
		if r.label != "" {
			name += " (" + r.label + ")"
		}
		switch {
		case !r.ran || r.err != nil:
			errs++
			fmt.Fprintf(w, "ERROR    %s: did not run to the end\n", name)
		case r.matched() && r.oversell:
			fmt.Fprintf(w, "ok       %s oversold, as expected: %s\n", name, r.why)
		case r.matched():
			fmt.Fprintf(w, "ok       %s did not oversell and is linearizable, as expected: %s\n", name, r.why)
		case r.oversell:
			bad++
			fmt.Fprintf(w, "MISMATCH %s did not oversell, but it should have: the race did not happen in this run\n", name)
		case r.rep.Oversold:
			bad++
			fmt.Fprintf(w, "MISMATCH %s OVERSOLD, and it must not\n", name)
		default:
			bad++
			fmt.Fprintf(w, "MISMATCH %s did not oversell, but its history must be linearizable: %s\n", name, r.rep.Linearizability.Line())
		}
	}
	for _, r := range results {
		if r.ran && !r.matched() {
			fmt.Fprintf(w, "\nReport of %s %s:\n%s", r.mode, r.fault, r.output.String())
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
	fmt.Fprintf(w, "\nmatrix: PASS: all %d rows as expected\n", len(results))
	return exitOK
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
