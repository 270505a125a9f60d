package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

// maxResultBody bounds the response body Vegeta keeps per result: purchase
// answers are a few hundred bytes, and an odd server must not fill memory.
const maxResultBody = 4 << 10

// attackName is Vegeta's attack name: it shows in `vegeta plot` legends.
const attackName = "sale"

// Run sells one product: it sets the sale up, attacks the purchase endpoint,
// reads the result back through the API and judges it with Check. It writes a
// header, the live progress and the report text to w, and blocks until done.
//
// The error is non-nil when there is no verdict to give: an invalid Config
// (wrapping ErrInvalidConfig), a target that cannot be reached or refuses the
// set-up, a verification that could not read the product back, or a results
// or plot file, or a report file, that could not be written (the Report is
// then complete).
//
// When ctx ends during the attack, Run stops sending, aborts requests in
// flight and still verifies (within Config.Timeout), because an interrupted
// sale can have oversold too; the Report says Stopped: "interrupted".
// Closing Config.End is not an interruption: the attack ends as at the end
// of its Duration. Run keeps no state between calls, so one process can
// run many sales.
func Run(ctx context.Context, cfg Config, w io.Writer) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if w == nil {
		w = io.Discard
	}

	tr := newTransport(cfg)
	defer tr.CloseIdleConnections()
	client := newClient(tr, cfg.Timeout)
	apis := make([]api, len(cfg.Targets))
	for i, t := range cfg.Targets {
		apis[i] = api{apiclient.New(client, t, cfg.AdminToken)}
	}

	prefix := fmt.Sprintf("lt-%08x-", rand.Uint32())
	hist := newHistory(time.Now(), cfg.HistoryLimit)
	set, err := setUp(ctx, cfg, apis, prefix)
	if err != nil {
		return Report{}, err
	}
	hist.initial(cfg, apis[0].Base, set)
	before := make([]Product, len(set))
	for i, s := range set {
		before[i] = s.p
	}
	if err := createReportFiles(cfg); err != nil {
		return Report{}, err
	}
	rec, err := newRecorder(cfg.Out, cfg.Plot, "seckill sale of "+productsText(before))
	if err != nil {
		return Report{}, err
	}
	if err := createEmpty(cfg.History); err != nil {
		rec.abort()
		return Report{}, fmt.Errorf("%w: history file: %v", ErrInvalidConfig, err)
	}
	side := newBeside(cfg, apis, hist, before)
	side.life = newLives(ctx, cfg.Life, apis, hist, prefix, rand.Uint64())

	total := sum(before)
	fmt.Fprintf(w, "loadtest: %s (stock %d, sold %d) on %d target(s); %s; at most %d requests; repeat share %.0f%%%s\n",
		productsText(before), total.Stock, total.Sold, len(cfg.Targets), cfg.Shape(), cfg.MaxRequests, cfg.RepeatShare*100, mixText(cfg))
	progressW := cfg.Progress
	if progressW == nil {
		progressW = w
	}
	smp := startSampler(ctx, apis[0], before, cfg.SampleInterval, time.Now())
	t, b, stopped := attack(ctx, cfg, tr, before, prefix, rec, side, progressW)
	side.life.finish(before, b.demandOf(), stopped == "", w)
	samples := smp.stop(t.start)
	recErr := rec.close()

	vctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		vctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout)
		defer cancel()
	}
	verifying := time.Now()
	snaps, err := snapshotAll(vctx, apis[0], before, cfg.Settle)
	if err != nil {
		return Report{}, fmt.Errorf("loadtest: verify after the attack: %w", err)
	}
	var orders []Order
	var listed time.Time
	unsettled := 0
	for _, sn := range snaps {
		// The read after the sale: the product's last read, which began
		// once its orders were listed.
		hist.productOp(OpRead, apis[0].Base, sn.listed, sn.read, nil, sn.after)
		orders = append(orders, sn.orders...)
		if sn.listed.After(listed) {
			listed = sn.listed
		}
		if int64(len(sn.orders)) != sn.after.Sold {
			unsettled++
		}
	}
	if cfg.Settle > 0 {
		settled := "the orders number the sold count"
		if unsettled > 0 {
			settled = fmt.Sprintf("the orders still do not number the sold count (of %d product(s))", unsettled)
			if len(snaps) == 1 {
				settled = fmt.Sprintf("the orders (%d) still do not number the sold count (%d)", len(snaps[0].orders), snaps[0].after.Sold)
			}
		}
		fmt.Fprintf(w, "loadtest: after %.1fs (of up to %v), %s\n", time.Since(verifying).Seconds(), cfg.Settle, settled)
	}

	requests, _ := b.counts()
	products, invariants := judgeProducts(before, snaps, prefix, t, b, side, stopped == "")
	rep := newReport(cfg, products, prefix, t, invariants, stopped)
	rep.addCharts(t, samples)
	rep.Reads, rep.Restocks = side.reads, side.restocksSent()
	rep.Reservations = side.life.report(orders, t.start)
	rep.Linearizability, rep.History, err = checkRun(cfg, hist, prefix, orders, listed)
	recErr = errors.Join(recErr, err)
	if int(requests) != rep.Requests {
		// Every hit yields one result; a gap would mean lost accounting.
		recErr = errors.Join(recErr, fmt.Errorf("loadtest: %d requests sent but %d results", requests, rep.Requests))
	}
	if err := rep.WriteText(w); err != nil {
		recErr = errors.Join(recErr, err)
	}
	recErr = errors.Join(recErr, rep.writeReportFiles(cfg))
	return rep, recErr
}

// productsText names the products of a sale: "product 7", or "2000
// products (7..2006)".
func productsText(ps []Product) string {
	if len(ps) == 1 {
		return fmt.Sprintf("product %d", ps[0].ID)
	}
	lo, hi := ps[0].ID, ps[0].ID
	for _, p := range ps {
		lo, hi = min(lo, p.ID), max(hi, p.ID)
	}
	return fmt.Sprintf("%d products (%d..%d)", len(ps), lo, hi)
}

// sum is the products' stock and sold added up.
func sum(ps []Product) Product {
	var t Product
	for _, p := range ps {
		t.Stock += p.Stock
		t.Sold += p.Sold
	}
	return t
}

// setUp checks that every target answers, creates the products (or reads
// the one given), and makes sure every target sees them: replicas on
// different databases would each sell the full stock, and that is a
// set-up mistake, not an oversell.
func setUp(ctx context.Context, cfg Config, apis []api, prefix string) ([]setUpOp, error) {
	for _, a := range apis {
		if err := a.Health(ctx); err != nil {
			return nil, fmt.Errorf("loadtest: target %s is not reachable (is the service running?): %w", a.Base, err)
		}
	}
	var set []setUpOp
	var err error
	if cfg.ProductID == 0 {
		set, err = createProducts(ctx, apis[0], cfg.Products, cfg.Stock, prefix)
	} else {
		call := time.Now()
		var p Product
		p, err = apis[0].Product(ctx, cfg.ProductID)
		set = []setUpOp{{p: p, call: call, ret: time.Now()}}
	}
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	last := set[len(set)-1].p
	for _, a := range apis[1:] {
		p, err := a.Product(ctx, last.ID)
		if err == nil && p.Name != last.Name {
			err = fmt.Errorf("it is called %q there, not %q", p.Name, last.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("loadtest: target %s does not see product %d (do the replicas share one database?): %w", a.Base, last.ID, err)
		}
	}
	return set, nil
}

// attack runs Vegeta until the pacing, the duration, cfg.End, the hard
// deadline or ctx stops it, and returns what it saw. stopped is empty on a
// normal end, which an end through cfg.End is.
func attack(ctx context.Context, cfg Config, tr http.RoundTripper, products []Product, prefix string,
	rec *recorder, side *beside, progressW io.Writer) (t *tally, b *buyers, stopped string) {
	atkCtx, cancel := context.WithTimeout(ctx, cfg.hardDeadline())
	defer cancel()

	attacker := vegeta.NewAttacker(
		vegeta.Client(newClient(abortable{ctx: atkCtx, base: tr}, cfg.Timeout)),
		vegeta.Workers(uint64(cfg.Workers)),
		vegeta.MaxWorkers(uint64(cfg.MaxWorkers)),
		vegeta.MaxBody(maxResultBody),
	)
	ids := make([]int64, len(products))
	for i, p := range products {
		ids[i] = p.ID
	}
	b = newBuyers(cfg.Targets, ids, cfg.Skew, prefix, cfg.RepeatShare, rand.Uint64())
	start := time.Now()
	t = newTally(start)
	results := attacker.Attack(mixTargeter(b, cfg.Targets, ids, cfg.Skew, cfg.Mix.Reads, rand.Uint64()), newPacer(cfg), cfg.Duration, attackName)
	side.start(atkCtx)

	// Vegeta has no context: turn ctx, the hard deadline and cfg.End into
	// Stop. Stop only ends the sending; ctx and the hard deadline also
	// abort the requests in flight (abortable), End lets them finish. The
	// goroutine ends with atkCtx, cancelled on return at the latest.
	go func() {
		select {
		case <-atkCtx.Done():
		case <-cfg.End: // nil: never
		}
		attacker.Stop()
	}()

	stopProgress, progressDone := make(chan struct{}), make(chan struct{})
	if p := newProgress(progressW, cfg.ProgressMode, start, b.sent.Load, &t.live); p != nil {
		go func() {
			defer close(progressDone)
			p.run(stopProgress)
		}()
	} else {
		close(progressDone)
	}

	for r := range results {
		rec.add(r)
		if side.result(r) {
			continue // a read
		}
		if o := t.add(r); o.created() {
			b.recordPurchase(o.user)
		}
	}
	side.end()
	switch {
	case ctx.Err() != nil:
		stopped = "interrupted"
	case atkCtx.Err() != nil:
		stopped = "hard deadline"
	}
	close(stopProgress)
	<-progressDone
	return t, b, stopped
}

// newReport gathers the numbers of a finished run.
func newReport(cfg Config, products []ProductReport, prefix string, t *tally,
	invariants []Invariant, stopped string) Report {
	rep := Report{
		Targets:    cfg.Targets,
		Shape:      cfg.Shape(),
		Mix:        cfg.Mix,
		ProductID:  products[0].ID,
		UserPrefix: prefix,
		Requests:   t.requests, Repeats: t.repeats, Created: t.created, Unknown: t.unknown,
		ByStatus: t.byStatus, ByOutcome: t.byKey, RepeatsByOutcome: t.repeatByKey,
		TransportErrors: t.transportErrors,
		Elapsed:         t.end,
		LastPurchase:    t.lastCreated,
		SoldOutAt:       t.soldOutAt(),
		Latency:         summarize(t.all),
		PurchaseLatency: summarize(t.purchases),
		Invariants:      invariants,
		Oversold:        Oversold(invariants),
		ExpectOversell:  cfg.ExpectOversell,
		Stopped:         stopped,
		Products:        products,
	}
	if len(products) > 1 {
		rep.ProductID = 0
		rep.Skew = cfg.Skew.orDefault().String()
	}
	for _, p := range products {
		rep.Before = addProducts(rep.Before, p.Before)
		rep.After = addProducts(rep.After, p.After)
		rep.RunOrders += p.Orders
		rep.Undersold = rep.Undersold || p.Undersold
	}
	if len(products) == 1 {
		rep.Before, rep.After = products[0].Before, products[0].After
	}
	if s := t.end.Seconds(); s > 0 {
		rep.RequestRate = float64(t.requests) / s
	}
	if s := t.lastCreated.Seconds(); s > 0 {
		rep.PurchaseRate = float64(t.created) / s
	}
	return rep
}
