package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// The design rows of the matrix: the designs people pick instead of a lock
// (app.Design), each without a fault and under the faults that matter to
// it, next to the lock under the same Redis restart. Each row has the
// outcome it must show, and its fault is made certain and then checked
// for, not hoped for:
//
//   - kill: one replica is a process of its own and is killed with SIGKILL
//     mid-sale. For the counter designs it pauses between the take and the
//     order's write (a chaos pause), and is killed once it holds at least
//     one taken item whose order it has not written (its
//     seckill_orders_pending gauge, read from its /metrics). redis-counter
//     then loses those items: the counter sold them, no order holds them.
//     redis-counter-async does not: the orders are in Redis, and the other
//     replica's writer claims them.
//   - Redis restart: Redis is restarted without persistence while
//     purchases (redis-counter) or writers (redis-counter-async) are held
//     between the take and the write, and let go only once the counter has
//     been rebuilt from the database. The rebuilt counter does not count
//     them, so their items are sold again. The async design also loses the
//     orders that were queued and not yet read: their buyers got a 201.
//     The lock keeps the sale exact: its fence is in the database.
//   - restocks: restocks (and reads) mixed into the sale, checked for
//     linearizability with the purchases.
//   - reservations: a sale with a payment window, its orders paid,
//     cancelled and left to lapse, driven by the row's own client and
//     checked from its end (matrix_life.go); and for redis-counter, a
//     replica killed between the database's return of cancelled orders'
//     units and the counter's, which loses them.
//
// The fault rows spread the burst over faultWindow, so that buyers keep
// coming after the fault, and have no repeat buyers.

// designFault is a design row's fault.
type designFault int

const (
	noDesignFault designFault = iota
	faultKill
	faultRestart
	faultRestock
	// faultReservations: the reservation rows' sale, without a fault;
	// faultReturnKill the same with the kill between the two returns.
	faultReservations
	faultReturnKill
	// The lock design's reservation rows (matrix_lifelock.go): two
	// replicas expiring at once, a replica killed or stopped mid-expiry,
	// a payment racing the expiry, and the controls of the expiry and
	// the payment.
	faultExpireTogether
	faultExpiryKill
	faultExpiryStop
	faultPayRace
	faultUnlockedExpiry
	faultUncheckedExpiry
	faultPayLate
)

// life reports whether f is a reservation row's: a sale with a payment
// window, driven by the row's own client (matrix_life.go).
func (f designFault) life() bool { return f >= faultReservations }

// designOutcome is what a design row must show.
type designOutcome int

const (
	// outcomeHolds: every safety invariant holds and the history is
	// linearizable.
	outcomeHolds designOutcome = iota
	// outcomeLosesSales: the counter sold items that no order holds; of
	// the safety invariants only sold == orders fails.
	outcomeLosesSales
	// outcomeSellsTwice: orders exceed the counter's sold count, by at
	// most the purchases held across the restart; only sold == orders
	// fails.
	outcomeSellsTwice
	// outcomeLosesOrders: 201s without orders (the queue lost with Redis)
	// and, beyond the counter's sold count, the orders writers held
	// across the restart; sold == orders and 201s == orders fail.
	outcomeLosesOrders
	// outcomeLosesUnits: units the database took back that the counter
	// never got, reserved for no order; of the reservation rows' checks
	// only reserved == pending and available + pending + paid == S fail,
	// by exactly the units the killed replica held.
	outcomeLosesUnits
	// outcomeCaught: a control of the lock design's reservation rows;
	// the checks its control breaks fail, and no other
	// (matrix_lifelock.go).
	outcomeCaught
)

// faultWindow spreads the burst of a fault row: buyers keep coming after a
// kill or a restart, whose effects show only in the sales after it.
const faultWindow = 2 * time.Second

// Settings of the kill rows: the victim pauses this long between the take
// and the write (it is killed long before), and writers take over queued
// orders left with another after orderClaimIdle.
const (
	victimPause    = time.Minute
	orderClaimIdle = time.Second
	restartSettle  = 3 * time.Second
)

// designRow is the design part of a matrix row.
type designRow struct {
	design  app.Design
	fault   designFault
	outcome designOutcome
}

// designRows are the matrix's rows of the designs, and the lock's row
// under the same Redis restart.
func designRows() []row {
	d := func(design app.Design, fault designFault, outcome designOutcome, label, why string) row {
		return row{mode: app.LockRedis, fault: label, oversell: outcome != outcomeHolds, why: why,
			design: &designRow{design: design, fault: fault, outcome: outcome}}
	}
	return []row{
		d(app.DesignConditional, noDesignFault, outcomeHolds, "",
			"the row's lock serialises the buyers: UPDATE ... WHERE stock > 0"),
		d(app.DesignCounter, noDesignFault, outcomeHolds, "",
			"one Lua script checks and takes: the buyers are serialised in Redis"),
		d(app.DesignCounterAsync, noDesignFault, outcomeHolds, "",
			"the same script queues the order; once written, every 201 is an order"),
		d(app.DesignConditional, faultKill, outcomeHolds, "kill -9 mid-sale",
			"the killed replica's transactions rolled back; nothing was taken outside one"),
		d(app.DesignCounter, faultKill, outcomeLosesSales, "kill -9 between take and insert",
			"the counter took items whose orders died with the replica: they are lost to the sale"),
		d(app.DesignCounterAsync, faultKill, outcomeHolds, "kill -9 between take and write",
			"the orders were in Redis: the other replica's writer claimed and wrote them"),
		d(app.DesignLock, faultRestart, outcomeHolds, "Redis restarted",
			"Redis forgot the locks and the token counter; the next tokens come from its clock, larger, and the fence in the database keeps the writes exact"),
		d(app.DesignCounter, faultRestart, outcomeSellsTwice, "Redis restarted",
			"the counter rebuilt from the orders did not count the purchases between take and insert: their items sold twice"),
		d(app.DesignCounterAsync, faultRestart, outcomeLosesOrders, "Redis restarted",
			"the queued orders died with Redis (201s without orders), and those in the writers' hands sold twice"),
		d(app.DesignConditional, faultRestock, outcomeHolds, "restocks",
			"a restock is a write to the same row, in line with the purchases"),
		d(app.DesignCounter, faultRestock, outcomeHolds, "restocks",
			"a restock is a script on the counter, in line with the takes"),
		d(app.DesignCounterAsync, faultRestock, outcomeHolds, "restocks",
			"a restock is a script on the counter, in line with the takes"),
		d(app.DesignConditional, faultReservations, outcomeHolds, "reservations",
			"each move is the orders' conditional update and a relative one of the row, in one transaction: every unit came back once"),
		d(app.DesignCounter, faultReservations, outcomeHolds, "reservations",
			"the database moved each order once, and the counter was told of each move"),
		d(app.DesignCounter, faultReturnKill, outcomeLosesUnits, "kill -9 between the database's return and Redis's",
			"the database took back the units of the cancels, the replica died before the counter got them: reserved for no order, lost to the sale"),
	}
}

// designName is the mode column of a row: its lock mode, or its design
// when it has one other than the lock.
func (r row) designName() string {
	if r.design == nil || r.design.design == app.DesignLock {
		return string(r.mode)
	}
	return string(r.design.design)
}

// designEvidence is what a design row's sale showed of its fault.
type designEvidence struct {
	missing string // why the fault was not injected, "" when it was
	// held counts the purchases (redis-counter) or the writers' batches'
	// orders (redis-counter-async) held between take and write when
	// Redis restarted, or taken by the killed replica and not written.
	held int64
	// builds counts the counters built from the database; claimed the
	// queued orders a writer took over from another.
	builds, claimed int64
	// soldAtFault is the sold count just before the fault.
	soldAtFault int64
	// life is a reservation row's end (matrix_life.go), and expiry what
	// the lock design's showed of its fault (matrix_lifelock.go).
	life   lifeEvidence
	expiry expiryEvidence
}

// designConfig is the configuration of a design row's replicas.
func (r row) designConfig(o options, redisAddr string) app.Config {
	cfg, _ := r.config(o, redisAddr)
	cfg.Design = r.design.design
	cfg.OrderClaimIdle = orderClaimIdle
	return cfg
}

// designSale is a design row's sale: the matrix's, spread over faultWindow
// for a kill or a restart, with reads and restocks for the restock rows,
// and with the orders awaited for the async design.
func (r row) designSale(o options) loadtest.Config {
	sale := o.sale
	switch r.design.fault {
	case faultKill, faultRestart:
		if sale.Buyers > 0 {
			sale.BurstWindow = max(sale.BurstWindow, faultWindow)
		}
		// No repeat buyers: one who bought before the fault and again
		// after it (the buyer set was lost) would take part in what the
		// row counts, one way or the other.
		sale.RepeatShare = 0
	case faultRestock:
		sale.Mix = loadtest.Mix{Reads: 0.1, RestockShare: 0.01} // one restock per 100 answers, at any speed
	}
	if r.design.design == app.DesignCounterAsync {
		sale.Settle = defaultAsyncSettle
		if r.design.fault == faultRestart {
			// Its orders never number the sold count: not worth the
			// whole wait. Those the writers held are written at once.
			sale.Settle = restartSettle
		}
	}
	return sale
}

// runDesignRow runs one design row's sale into res: it starts the replicas,
// injects the fault while the load test sells, and keeps the evidence.
func runDesignRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	if res.design.fault.life() {
		runLifeRow(ctx, o, rds, logger, res)
		return
	}
	cfg := res.designConfig(o, rds.addr)
	logger = logger.With("design", res.design.design, "fault", res.fault)
	var hook *holdHook
	specs := []replicaSpec{{cfg: cfg}, {cfg: cfg}}
	switch res.design.fault {
	case faultKill:
		if o.command == nil {
			res.err = errors.New("the kill rows need replicas as processes of their own (no replica command)")
			return
		}
		victim := cfg
		if cfg.Design != app.DesignConditional {
			victim.ChaosPause, victim.ChaosProb = victimPause, 1
		}
		specs[1] = replicaSpec{cfg: victim, command: o.command}
	case faultRestart:
		if cfg.Design != app.DesignLock {
			hook = &holdHook{gate: make(chan struct{})}
			for i := range specs {
				specs[i].cfg.Chaos = hook.run
			}
		}
	}
	c, err := startReplicas(ctx, specs, logger)
	if err != nil {
		res.err = err
		return
	}
	sale := res.designSale(o)
	sale.Targets, sale.AdminToken = c.urls, cfg.AdminToken
	sale.ProgressMode = loadtest.ProgressOff
	sale.Report, sale.ReportJSON = "", ""
	sale.NoVisualization = true

	fctx, stopFault := context.WithCancel(ctx)
	faultDone := make(chan designEvidence, 1)
	go func() {
		var ev designEvidence
		switch res.design.fault {
		case faultKill:
			ev = killVictim(fctx, c, cfg)
		case faultRestart:
			ev = restartRedis(fctx, c, rds, hook, cfg.Design)
		}
		faultDone <- ev
	}()
	res.rep, res.err = loadtest.Run(ctx, sale, &res.output)
	stopFault()
	res.dev = <-faultDone
	if hook != nil {
		hook.release() // a sale that ended before the fault
	}
	res.ran = ctx.Err() == nil
	ev := c.counterEvidence()
	res.dev.builds, res.dev.claimed = ev.builds, ev.claimed
	if res.design.fault == faultRestock && res.rep.Restocks == 0 && res.dev.missing == "" {
		res.dev.missing = "no restock was answered during the sale"
	}
	if err := c.Close(); err != nil && res.err == nil {
		res.err = fmt.Errorf("clean up: %w", err)
	}
}

// saleProduct is the product of a row's sale: the only one in the row's
// new database, which the load test creates.
const saleProduct = 1

// faultDeadline bounds the wait for a fault's moment: a sale that never
// gets there ends the wait with ctx first.
const faultDeadline = 30 * time.Second

// killVictim waits until the victim (the cluster's replica process) is
// mid-sale, kills it with SIGKILL, and says what it held: for the counter
// designs, at least one item taken whose order it has not written; for
// the conditional design, a sale under way (sold between 1 and the stock
// less one).
func killVictim(ctx context.Context, c *cluster, cfg app.Config) designEvidence {
	victim := c.processes[0]
	client := apiclient.New(&http.Client{Timeout: 5 * time.Second}, c.urls[0], cfg.AdminToken)
	var ev designEvidence
	err := awaitFault(ctx, func() (bool, error) {
		if cfg.Design != app.DesignConditional {
			n, err := scrapeGauge(ctx, victim.url, "seckill_orders_pending")
			ev.held = n
			return n >= 1, err
		}
		p, err := client.Product(ctx, saleProduct)
		if err != nil {
			return false, err
		}
		ev.soldAtFault = p.Sold
		return p.Sold >= 1 && p.Stock >= 1, nil
	})
	if err != nil {
		ev.missing = "the victim was never mid-sale: " + err.Error()
		return ev
	}
	if err := victim.kill(); err != nil {
		ev.missing = err.Error()
	}
	return ev
}

// restartRedis waits until the hook holds purchases or writers between
// take and write (for the async design, also until orders are queued that
// no writer holds), restarts Redis, waits until a counter has been rebuilt
// from the database, and lets the held ones go. For the lock design, with
// no hook, it restarts Redis once the sale is under way.
func restartRedis(ctx context.Context, c *cluster, rds *redisHandle, hook *holdHook, design app.Design) designEvidence {
	var ev designEvidence
	client := apiclient.New(&http.Client{Timeout: 5 * time.Second}, c.urls[0], "")
	err := awaitFault(ctx, func() (bool, error) {
		p, err := client.Product(ctx, saleProduct)
		if err != nil {
			return false, err
		}
		ev.soldAtFault = p.Sold
		switch {
		case hook == nil:
			return p.Sold >= 1 && p.Stock >= 1, nil
		case design == app.DesignCounterAsync:
			// Orders in the writers' hands, and more queued behind them.
			ev.held = c.counterEvidence().pending
			return ev.held >= 1 && p.Sold > ev.held, nil
		}
		ev.held = hook.count()
		return ev.held >= 1, nil
	})
	if err != nil {
		ev.missing = "the sale never got to the restart: " + err.Error()
		return ev
	}
	if err := rds.restart(context.WithoutCancel(ctx)); err != nil {
		ev.missing = "restart Redis: " + err.Error()
		return ev
	}
	if hook == nil {
		return ev
	}
	// The held ones are still held: count them all, an upper bound of
	// those held at the restart (any held since took from the rebuilt
	// counter, which counts them).
	if design == app.DesignCounter {
		ev.held = hook.count()
	} else {
		ev.held = max(ev.held, c.counterEvidence().pending)
	}
	// The held ones go only once the counter was rebuilt without them.
	err = awaitFault(ctx, func() (bool, error) { return c.counterEvidence().builds >= 2, nil })
	hook.release()
	if err != nil {
		ev.missing = "no counter was rebuilt after the restart: " + err.Error()
	}
	return ev
}

// awaitFault polls cond until it holds, ctx ends or faultDeadline passes.
// Errors of cond (a replica not answering yet) are retried.
func awaitFault(ctx context.Context, cond func() (bool, error)) error {
	return awaitEvery(ctx, 2*time.Millisecond, cond)
}

// awaitEvery is awaitFault polling every tick.
func awaitEvery(ctx context.Context, tick time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, faultDeadline)
	defer cancel()
	t := time.NewTicker(tick)
	defer t.Stop()
	var last error
	for {
		if ok, err := cond(); ok {
			return nil
		} else if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-t.C:
		}
	}
}

// scrapeGauge reads one metric without labels from a replica's /metrics.
func scrapeGauge(ctx context.Context, base, name string) (int64, error) {
	m, err := scrapeMetrics(ctx, base, name)
	return m[name], err
}

// scrapeMetrics reads series from one read of a replica's /metrics: each
// a metric's name and labels as the text format writes them, such as
// seckill_orders_closed_total{state="expired"}. A series it lacks is an
// error.
func scrapeMetrics(ctx context.Context, base string, series ...string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := make(map[string]int64, len(series))
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		key, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(series, key) {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return out, fmt.Errorf("%s/metrics: %s: %w", base, key, err)
		}
		out[key] = int64(f)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("%s/metrics: %w", base, err)
	}
	for _, s := range series {
		if _, ok := out[s]; !ok {
			return out, fmt.Errorf("%s/metrics has no %s", base, s)
		}
	}
	return out, nil
}

// holdHook is the Redis-restart rows' chaos hook, shared by the replicas
// of one sale (they run in this process): every call waits there until
// release, counted. In redis-counter a call is a purchase between its take
// and its insert; in redis-counter-async, a writer between reading a batch
// of orders and writing it.
type holdHook struct {
	mu   sync.Mutex
	held int64
	gate chan struct{}
	once sync.Once
}

func (h *holdHook) run(ctx context.Context, _ []int64) {
	h.mu.Lock()
	h.held++
	h.mu.Unlock()
	select {
	case <-h.gate:
	case <-ctx.Done():
	}
}

func (h *holdHook) count() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

func (h *holdHook) release() { h.once.Do(func() { close(h.gate) }) }

// failedSafety lists the numbers of the safety invariants that failed.
func failedSafety(rep loadtest.Report) []int {
	var failed []int
	for _, inv := range rep.Invariants {
		if inv.Safety && inv.Status == loadtest.Fail {
			failed = append(failed, inv.Number)
		}
	}
	return failed
}

// designVerdict judges a design row: "ok", "fault not injected" or
// "mismatch", with what it saw. A row without its fault shows nothing, and
// fails the matrix like a mismatch.
func (r *result) designVerdict() (v, detail string) {
	if r.design.fault.life() {
		return r.lifeVerdict()
	}
	rep, ev := r.rep, r.dev
	s := rep.Before.Stock + rep.Before.Sold
	orders, sold := int64(rep.RunOrders), rep.After.Sold
	failed := failedSafety(rep)
	facts := fmt.Sprintf("orders %d of a stock of %d", orders, s)
	if r.design.fault == faultRestock {
		facts = fmt.Sprintf("orders %d", orders) // of a stock the restocks kept setting
	}
	facts += fmt.Sprintf(", sold %d, 201s %d, failed invariants %v, linearizable %s", sold, rep.Created, failed, r.linText())
	switch r.design.fault {
	case faultKill:
		if r.design.design == app.DesignConditional {
			facts += fmt.Sprintf("; killed at sold %d", ev.soldAtFault)
		} else {
			facts += fmt.Sprintf("; killed holding %d item(s) taken and not written", ev.held)
		}
		if r.design.design == app.DesignCounterAsync {
			facts += fmt.Sprintf(", %d queued order(s) taken over", ev.claimed)
		}
	case faultRestart:
		facts += fmt.Sprintf("; Redis restarted at sold %d", ev.soldAtFault)
		if r.design.design != app.DesignLock {
			facts += fmt.Sprintf(" with %d held between take and write, %d counter(s) built", ev.held, ev.builds)
		}
	case faultRestock:
		facts += fmt.Sprintf("; %d restock(s) answered", rep.Restocks)
	}
	if ev.missing != "" {
		return "fault not injected", ev.missing + " (" + facts + ")"
	}
	if r.design.design == app.DesignCounterAsync && r.design.fault == faultKill && ev.claimed == 0 {
		return "fault not injected", "no writer took over the killed one's orders (" + facts + ")"
	}
	ok := false
	switch r.design.outcome {
	case outcomeHolds:
		ok = !rep.Oversold && rep.Linearizability.Verdict == loadtest.LinYes
	case outcomeLosesSales:
		ok = slices.Equal(failed, []int{2}) && sold > orders && orders <= s
	case outcomeSellsTwice:
		ok = slices.Equal(failed, []int{2}) && orders > sold && orders-sold <= ev.held
	case outcomeLosesOrders:
		ok = slices.Equal(failed, []int{2, 4}) && int64(rep.Created) > orders && orders > sold && orders-sold <= ev.held
	}
	if !ok {
		return "mismatch", facts
	}
	return "ok", facts
}

// rowDesign is the row's design: the lock for the lock modes' rows.
func (r row) rowDesign() app.Design {
	if r.design == nil {
		return app.DesignLock
	}
	return r.design.design
}

// writeDesignLegend explains the design rows' faults, when there are any.
func writeDesignLegend(w io.Writer, results []*result) {
	if !slices.ContainsFunc(results, func(r *result) bool { return r.design != nil && !r.lockLife() }) {
		return
	}
	fmt.Fprintf(w, "designs: conditional (UPDATE ... WHERE stock > 0, then the insert, one transaction; no Redis), redis-counter\n"+
		"(a Lua script takes from a counter in Redis, then the insert), redis-counter-async (the script also queues the order;\n"+
		"201 at once, writers insert in the background; the check waits up to %v for the orders). orders: this sale's orders.\n"+
		"Their fault rows spread the burst over %v, without repeat buyers. kill -9: one replica, a process of its own, is\n"+
		"killed mid-sale; for the counters it pauses between take and write and is killed holding taken items. Redis\n"+
		"restarted: without persistence, while purchases (or writers) are held between take and write until the counter is\n"+
		"rebuilt from the database. restocks: reads and a restock per 100 answers mixed in. reservations: a %v payment\n"+
		"window, the row's own client pays a third of the orders, cancels a third, leaves a third to lapse, then a last wave\n"+
		"buys what is on sale; the product is checked against its orders (matrix_life.go). kill -9 between the database's\n"+
		"return and Redis's: the victim pauses there, is sent %d cancels and killed holding them. oversold YES: a safety\n"+
		"invariant (or a reservation row's check) failed, as the verdict says.\n",
		defaultAsyncSettle, faultWindow, lifeWindow, victimCancels)
}

// outcomeText is the outcome a design row must show, in words.
func (d *designRow) outcomeText() string {
	switch d.outcome {
	case outcomeLosesSales:
		return "lost sales"
	case outcomeSellsTwice:
		return "sold items twice"
	case outcomeLosesOrders:
		return "lost orders and sold items twice"
	case outcomeLosesUnits:
		return "lost units"
	case outcomeCaught:
		return "was caught"
	}
	return "held"
}

// designJudge is judge for a design row that ran to the end: the matrix's
// verdict of designVerdict, and why, with the row's facts.
func (r *result) designJudge() (verdict, string) {
	v, facts := r.designVerdict()
	switch v {
	case "ok":
		return verdictOK, r.why + " (" + facts + ")"
	case "fault not injected":
		return verdictNoFault, facts
	case "not caught":
		return verdictMismatch, "NOT CAUGHT: its checks passed, though its fault happened: " + facts
	}
	if r.design.outcome == outcomeCaught {
		return verdictMismatch, "caught, but not by the checks its control breaks: " + facts
	}
	return verdictMismatch, "should have " + r.design.outcomeText() + ": " + facts
}
