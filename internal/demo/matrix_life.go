package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// The reservation rows of the matrix: a sale with a payment window, driven
// by the row's own client, so that a fault row knows exactly what its
// victim holds (the load test's buyers, in the demo's -window sale, move
// at random times on random replicas): buyers reserve, a third of the
// orders is paid, a third cancelled and a third left to lapse, the
// replicas expire those, and a last wave of new buyers takes what is left
// on sale. Then the product, as the API reports it, is checked against
// the orders listed:
//
//  1. available >= 0
//  2. available + reserved + sold == S
//  3. reserved == the pending orders
//  4. sold == the paid orders
//  5. available + pending + paid orders == S: every unit on sale or held
//     by an order, none lost, none sold twice
//  6. every 201 is one order, and no user holds two live orders
//  7. no order pending past its window plus the row's lag: each expired
//     order closed by then, and none still pending at the end past it
//  8. every order whose payment was answered 200 is listed paid
//  9. no order paid after its window: a paid order's closed_at is not
//     past its expires_at (both stamped by the service's clock)
//
// A row's fault comes in at one of the sale's steps (lifePlan): after
// wave 1, while the lapsed orders wait for their expiry, or once they
// are expired; the lock design's rows are in matrix_lifelock.go.
//
// The redis-counter kill row is that design's guarantee it cannot keep:
// a cancel or an expiry moves the order in the database, then gives the
// unit back to the counter in Redis, and a replica killed between the two
// loses the unit. The victim, a process of its own, pauses there
// (CHAOS_EXPIRY_PAUSE); it is sent victimCancels cancels, killed with
// SIGKILL once its seckill_units_returning gauge (its /metrics) shows all
// of them between the two writes, and the checks must then fail exactly 3
// and 5, by exactly those units: the counter keeps them reserved for
// orders that are cancelled, and nobody can buy them.

// Settings of the reservation rows.
const (
	// lifeWindow is the rows' payment window: long enough for wave 1,
	// the pays, the cancels and the kill to come before it ends.
	lifeWindow = 4 * time.Second
	// victimCancels is how many cancels the kill row sends the victim.
	victimCancels = 3
	// lifeWorkers bounds the row's client's requests in flight.
	lifeWorkers = 16
	// lifeSteps is how many groups a paced wave 1 is sent in
	// (lifePlan.spread).
	lifeSteps = 10
	// listEvery is how often a wait reads the orders listed: each read
	// is every order of the sale, and the replicas it waits for share
	// the machine.
	listEvery = 20 * time.Millisecond
)

// lifeEvidence is what a reservation row's sale ended with.
type lifeEvidence struct {
	supply int64 // S: the stock the product was created with
	// lag is check 7's bound, and readAt when the end was read.
	lag    time.Duration
	readAt time.Time
	// The product as the API reports it at the end.
	available, reserved, sold int64
	// The orders listed at the end, by state.
	pending, paid, cancelled, expired int64
	// created counts the 201s; lastWave the last wave's buyers and
	// lastBought those of them who got one.
	created, lastWave, lastBought int
	// moved is, by order, the moves answered 200: "paid" or "cancelled".
	moved map[int64]string
	// victimMoved counts the cancels sent to the victim whose orders the
	// database shows cancelled.
	victimMoved int
	checks      []loadtest.Invariant
}

// lifePlan is what a row adds to the common sale.
type lifePlan struct {
	// spread paces wave 1: its buyers go in lifeSteps groups, evenly
	// over spread, so that their orders come due over that long rather
	// than at once. 0 sends them all at once.
	spread time.Duration
	// lag is check 7's bound: how long past its window an order may be
	// pending, the expiry's lag with the row's fault.
	lag time.Duration
	// The fault's steps, each run when set: after wave 1, before the
	// pays and cancels (beforeMoves); once those are answered, while
	// the lapsing orders wait for their expiry (lapse); once no order
	// is pending, before the last wave (settled). Each returns why its
	// fault did not happen ("" when it did; the sale then stops and the
	// row is "fault not injected"), or an error that stops the sale.
	beforeMoves, lapse, settled func(ctx context.Context, r *lifeRun) (string, error)
}

// lifeRun is a reservation row's sale under way: what its steps and its
// fault share.
type lifeRun struct {
	c    *cluster
	a, b lifeClient // replica 1's (c.urls[0]) and replica 2's
	w    io.Writer
	ev   *designEvidence
	// Wave 1's orders, by what their buyers do.
	pays, cancels, lapses []lifeOrder

	mu      sync.Mutex
	created int
	moved   map[int64]string
}

// reserve buys for user through cl, counting the 201s.
func (r *lifeRun) reserve(ctx context.Context, cl lifeClient, user string) (*lifeOrder, error) {
	o, err := cl.reserve(ctx, user)
	if o != nil {
		r.mu.Lock()
		r.created++
		r.mu.Unlock()
	}
	return o, err
}

// move pays or cancels o through cl, and remembers a move answered 200.
func (r *lifeRun) move(ctx context.Context, cl lifeClient, verb string, o lifeOrder) (bool, error) {
	ok, err := cl.move(ctx, verb, o)
	if ok {
		state := map[string]string{"pay": "paid", "cancel": "cancelled"}[verb]
		r.mu.Lock()
		r.moved[o.ID] = state
		r.mu.Unlock()
	}
	return ok, err
}

// awaitList reads the orders every listEvery until done says the listing
// is what it waits for, faultDeadline at most, and returns the last
// listing.
func (r *lifeRun) awaitList(ctx context.Context, done func([]lifeOrder) bool) ([]lifeOrder, error) {
	var last []lifeOrder
	err := awaitEvery(ctx, listEvery, func() (bool, error) {
		_, listed, err := r.a.state(ctx)
		if err != nil {
			return false, err
		}
		last = listed
		return done(listed), nil
	})
	return last, err
}

// runLifeRow runs a reservation row's sale into res.
func runLifeRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	start := time.Now()
	cfg := res.designConfig(o, rds.addr)
	cfg.PayWindow = lifeWindow
	logger = logger.With("design", res.design.design, "fault", res.fault)
	specs, plan, err := res.lifeSetup(o, cfg)
	if err != nil {
		res.err = err
		return
	}
	c, err := startReplicas(ctx, specs, logger)
	if err != nil {
		res.err = err
		return
	}
	defer func() {
		if err := c.Close(); err != nil && res.err == nil {
			res.err = fmt.Errorf("clean up: %w", err)
		}
	}()
	res.dev, res.err = lifeSale(ctx, o.sale.Stock, c, cfg.AdminToken, plan, &res.output)
	res.ran = ctx.Err() == nil
	res.fenceRejected, res.leaseLost = c.counters()
	res.fenceRejected += res.dev.expiry.refused
	res.leaseLost += res.dev.expiry.leasesLost
	lev := res.dev.life
	res.rep = loadtest.Report{
		Targets: c.urls, ProductID: saleProduct, Shape: fmt.Sprintf("reservations, a %v window", lifeWindow),
		Before:    loadtest.Product{Stock: lev.supply},
		After:     loadtest.Product{Stock: lev.available, Sold: lev.sold},
		RunOrders: int(lev.pending + lev.paid + lev.cancelled + lev.expired), Created: lev.created,
		Elapsed: time.Since(start), Invariants: lev.checks,
	}
	for _, inv := range lev.checks {
		res.rep.Oversold = res.rep.Oversold || inv.Status == loadtest.Fail
	}
}

// lifeSetup is the replicas of a reservation row, each of cfg but for its
// fault's settings, and its plan: replica 1 runs in this process, and for
// a fault that signals replica 2, replica 2 is a process of its own.
func (r row) lifeSetup(o options, cfg app.Config) ([]replicaSpec, lifePlan, error) {
	if r.design.design == app.DesignLock {
		return r.lockLifeSetup(o, cfg) // matrix_lifelock.go
	}
	specs := []replicaSpec{{cfg: cfg}, {cfg: cfg}}
	plan := lifePlan{lag: expiryLag(cfg)}
	if r.design.fault == faultReturnKill {
		if o.command == nil {
			return nil, plan, errors.New("the kill rows need replicas as processes of their own (no replica command)")
		}
		victim := cfg
		victim.ChaosExpiryPause, victim.ChaosProb = victimPause, 1
		// Its own expiry never runs before the kill: what it holds then
		// is the cancels sent to it, and nothing else.
		victim.ExpireInterval = time.Hour
		specs[1] = replicaSpec{cfg: victim, command: o.command}
		plan.beforeMoves = counterReturnKill
	}
	return specs, plan, nil
}

// lifeSale is the sale of a reservation row on c, whose replica 1 (c's
// first URL) runs in this process, with plan's pace and fault.
func lifeSale(ctx context.Context, stock int64, c *cluster, token string, plan lifePlan, w io.Writer) (designEvidence, error) {
	var ev designEvidence
	lev := &ev.life
	lev.supply, lev.lag = stock, plan.lag
	// A transport of its own, whose idle connections are closed at the
	// end: a connection dialled and never used would hold up the
	// replicas' graceful shutdown.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: lifeWorkers}}
	defer hc.CloseIdleConnections()
	r := &lifeRun{c: c, a: newLifeClient(hc, c.urls[0], token), b: newLifeClient(hc, c.urls[1], token), w: w, ev: &ev,
		moved: map[int64]string{}}
	// What the sale saw, whether it ran to the end or stopped at a fault
	// that did not happen.
	defer func() {
		r.mu.Lock()
		lev.created, lev.moved = r.created, r.moved
		r.mu.Unlock()
	}()
	if _, err := r.a.CreateProduct(ctx, "reserved phone", stock); err != nil {
		return ev, err
	}
	orders, err := r.wave1(ctx, stock, plan.spread)
	if err != nil {
		return ev, err
	}
	for i, o := range orders {
		switch i % 3 {
		case 0:
			r.pays = append(r.pays, o)
		case 1:
			r.cancels = append(r.cancels, o)
		default:
			r.lapses = append(r.lapses, o)
		}
	}
	fmt.Fprintf(w, "wave 1: %d buyers, %d reserved of %d; paying %d, cancelling %d, %d left to lapse\n",
		stock+stock/4, len(orders), stock, len(r.pays), len(r.cancels), len(r.lapses))
	step := func(f func(context.Context, *lifeRun) (string, error)) bool {
		if f != nil && err == nil && ev.missing == "" {
			ev.missing, err = f(ctx, r)
		}
		return err == nil && ev.missing == ""
	}
	if !step(plan.beforeMoves) {
		return ev, err
	}
	err = each(r.pays, func(_ int, o lifeOrder) error { _, err := r.move(ctx, r.a, "pay", o); return err })
	if err == nil {
		err = each(r.cancels, func(_ int, o lifeOrder) error { _, err := r.move(ctx, r.b, "cancel", o); return err })
	}
	if !step(plan.lapse) {
		return ev, err
	}
	// The replicas' expiry, and nothing else, ends the lapsed orders; one
	// still pending past its window and the lag fails check 7. An expired
	// order without its closed_at belongs to an expiry that has not yet
	// finished its writes (it records closed_at last).
	if _, err := r.awaitList(ctx, func(l []lifeOrder) bool { return !slices.ContainsFunc(l, unsettled) }); err != nil {
		if ctx.Err() != nil {
			return ev, err
		}
		fmt.Fprintf(w, "orders still pending after %v: %v\n", faultDeadline, err)
	}
	if !step(plan.settled) {
		return ev, err
	}
	if lev.lastBought, err = r.lastWave(ctx, stock); err != nil {
		return ev, err
	}
	p, listed, err := r.a.state(ctx)
	if err != nil {
		return ev, err
	}
	lev.readAt = time.Now()
	lev.available, lev.reserved, lev.sold = p.Stock, p.Reserved, p.Sold
	for _, o := range listed {
		switch o.State {
		case "pending":
			lev.pending++
		case "paid":
			lev.paid++
		case "cancelled":
			lev.cancelled++
		case "expired":
			lev.expired++
		}
	}
	r.mu.Lock()
	lev.created, lev.moved = r.created, r.moved
	r.mu.Unlock()
	lev.lastWave = int(stock)
	lev.checks = lifeChecks(*lev, listed)
	fmt.Fprintf(w, "last wave: %d new buyers, %d reserved; the product: available %d, reserved %d, sold %d; orders: %d pending, %d paid, %d cancelled, %d expired\n",
		lev.lastWave, lev.lastBought, lev.available, lev.reserved, lev.sold, lev.pending, lev.paid, lev.cancelled, lev.expired)
	for _, inv := range lev.checks {
		fmt.Fprintf(w, "  %d. %-46s %s  %s\n", inv.Number, inv.Name, inv.Status, inv.Detail)
	}
	return ev, nil
}

func isPending(o lifeOrder) bool { return o.State == "pending" }

// unsettled is an order pending, or expired by an expiry still at work.
func unsettled(o lifeOrder) bool { return isPending(o) || o.State == "expired" && o.ClosedAt.IsZero() }

// wave1 sends more buyers than units, on both replicas, in lifeSteps
// groups evenly over spread (at once when spread is 0), and returns their
// orders in id order.
func (r *lifeRun) wave1(ctx context.Context, stock int64, spread time.Duration) ([]lifeOrder, error) {
	users := make([]string, stock+stock/4)
	for i := range users {
		users[i] = fmt.Sprintf("buyer-%d", i)
	}
	steps := 1
	if spread > 0 {
		steps = lifeSteps
	}
	var mu sync.Mutex
	var orders []lifeOrder
	start := time.Now()
	for k := range steps {
		if !wait(ctx, time.Until(start.Add(spread*time.Duration(k)/time.Duration(steps))), nil) {
			return nil, ctx.Err()
		}
		group := users[k*len(users)/steps : (k+1)*len(users)/steps]
		err := each(group, func(i int, u string) error {
			cl := r.a
			if i%2 == 1 {
				cl = r.b
			}
			o, err := r.reserve(ctx, cl, u)
			if err != nil || o == nil {
				return err
			}
			mu.Lock()
			orders = append(orders, *o)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(orders, func(x, y lifeOrder) int { return int(x.ID - y.ID) })
	return orders, nil
}

// lastWave sends new buyers for every unit of the supply, through
// replica 1: they get what is on sale, and no more. It returns how many
// bought.
func (r *lifeRun) lastWave(ctx context.Context, stock int64) (int, error) {
	last := make([]string, stock)
	for i := range last {
		last[i] = fmt.Sprintf("last-%d", i)
	}
	var mu sync.Mutex
	bought := 0
	err := each(last, func(_ int, u string) error {
		o, err := r.reserve(ctx, r.a, u)
		if o != nil {
			mu.Lock()
			bought++
			mu.Unlock()
		}
		return err
	})
	return bought, err
}

// counterReturnKill is the redis-counter kill row's fault, before the
// pays and cancels: victimCancels of the cancels go to the victim, which
// is killed holding them between the database's return and Redis's; the
// other cancels then go to replica 1.
func counterReturnKill(ctx context.Context, r *lifeRun) (string, error) {
	if len(r.cancels) < victimCancels {
		return fmt.Sprintf("only %d orders to cancel, %d needed", len(r.cancels), victimCancels), nil
	}
	var sent []lifeOrder
	sent, r.cancels = r.cancels[:victimCancels], r.cancels[victimCancels:]
	held, missing := killMidReturn(ctx, r.c, r.b, sent, r.w)
	r.ev.held = held
	if missing != "" {
		return missing, nil
	}
	_, listed, err := r.a.state(ctx)
	if err != nil {
		return "", err
	}
	for _, o := range listed {
		if slices.ContainsFunc(sent, func(s lifeOrder) bool { return s.ID == o.ID }) && o.State == "cancelled" {
			r.ev.life.victimMoved++
		}
	}
	r.b = r.a // the victim is gone
	return "", nil
}

// killMidReturn sends the cancels of sent to the victim, waits until its
// units_returning gauge shows every one of them between the database's
// move and the counter's give-back, and kills it with SIGKILL. It returns
// how many units it held then, or why the fault did not happen.
func killMidReturn(ctx context.Context, c *cluster, victim lifeClient, sent []lifeOrder, w io.Writer) (int64, string) {
	proc := c.processes[0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Each cancel hangs in the victim's pause, until the kill cuts it.
		_ = each(sent, func(_ int, o lifeOrder) error { _, err := victim.move(ctx, "cancel", o); return err })
	}()
	var held int64
	err := awaitFault(ctx, func() (bool, error) {
		n, err := scrapeGauge(ctx, proc.url, "seckill_units_returning")
		held = n
		return n >= int64(len(sent)), err
	})
	if err != nil {
		_ = proc.kill()
		<-done
		return held, fmt.Sprintf("the victim never held the %d units between the two writes (held %d): %v", len(sent), held, err)
	}
	if err := proc.kill(); err != nil {
		<-done
		return held, err.Error()
	}
	<-done
	fmt.Fprintf(w, "the victim, paused between the database's move and the counter's give-back of %d cancels, killed with SIGKILL holding %d unit(s)\n",
		len(sent), held)
	return held, ""
}

// lifeChecks judges the end of a reservation row's sale (see the top of
// this file).
func lifeChecks(l lifeEvidence, orders []lifeOrder) []loadtest.Invariant {
	check := func(n int, name string, ok bool, detail string) loadtest.Invariant {
		st := loadtest.Pass
		if !ok {
			st = loadtest.Fail
		}
		return loadtest.Invariant{Number: n, Name: name, Safety: true, Status: st, Detail: detail}
	}
	ids, live := map[int64]bool{}, map[string]bool{}
	dup := ""
	var overdue, paidMoved, paidLate []string
	for _, o := range orders {
		if ids[o.ID] {
			dup = fmt.Sprintf("order %d listed twice", o.ID)
		}
		ids[o.ID] = true
		if o.State == "pending" || o.State == "paid" {
			if live[o.UserID] {
				dup = fmt.Sprintf("user %s holds two live orders", o.UserID)
			}
			live[o.UserID] = true
		}
		if l.moved[o.ID] == "paid" && o.State != "paid" {
			paidMoved = append(paidMoved, fmt.Sprintf("order %d %s", o.ID, o.State))
		}
		if o.ExpiresAt.IsZero() {
			continue // no window: nothing to check against it
		}
		bound := o.ExpiresAt.Add(l.lag)
		switch {
		case o.State == "pending" && l.readAt.After(bound):
			overdue = append(overdue, fmt.Sprintf("order %d pending %v past its window", o.ID, l.readAt.Sub(o.ExpiresAt).Round(time.Millisecond)))
		case o.State == "expired" && o.ClosedAt.IsZero():
			overdue = append(overdue, fmt.Sprintf("order %d expired, its closed_at not recorded", o.ID))
		case o.State == "expired" && o.ClosedAt.After(bound):
			overdue = append(overdue, fmt.Sprintf("order %d expired %v past its window", o.ID, o.ClosedAt.Sub(o.ExpiresAt).Round(time.Millisecond)))
		case o.State == "paid" && o.ClosedAt.After(o.ExpiresAt):
			paidLate = append(paidLate, fmt.Sprintf("order %d paid %v past its window", o.ID, o.ClosedAt.Sub(o.ExpiresAt).Round(time.Microsecond)))
		}
	}
	return []loadtest.Invariant{
		check(1, "available >= 0", l.available >= 0, fmt.Sprintf("available %d", l.available)),
		check(2, "available + reserved + sold == S", l.available+l.reserved+l.sold == l.supply,
			fmt.Sprintf("%d + %d + %d, S %d", l.available, l.reserved, l.sold, l.supply)),
		check(3, "reserved == pending orders", l.reserved == l.pending, fmt.Sprintf("reserved %d, pending %d", l.reserved, l.pending)),
		check(4, "sold == paid orders", l.sold == l.paid, fmt.Sprintf("sold %d, paid %d", l.sold, l.paid)),
		check(5, "available + pending + paid == S", l.available+l.pending+l.paid == l.supply,
			fmt.Sprintf("%d + %d + %d, S %d", l.available, l.pending, l.paid, l.supply)),
		check(6, "one order per 201, one live order per user", dup == "" && len(orders) == l.created,
			strings.TrimSuffix(fmt.Sprintf("%d orders, %d 201s; %s", len(orders), l.created, dup), "; ")),
		check(7, "nothing pending past its window + lag", len(overdue) == 0, listText(overdue, fmt.Sprintf("lag %v", l.lag))),
		check(8, "every payment answered 200 is paid", len(paidMoved) == 0, listText(paidMoved, fmt.Sprintf("%d payments answered 200", countMoved(l.moved, "paid")))),
		check(9, "no payment after its window", len(paidLate) == 0, listText(paidLate, "closed_at <= expires_at")),
	}
}

// listText is a check's detail: how many of what went wrong and the
// first few, or else ok.
func listText(bad []string, ok string) string {
	if len(bad) == 0 {
		return ok
	}
	return fmt.Sprintf("%d: %s", len(bad), strings.Join(bad[:min(len(bad), 3)], ", "))
}

// countMoved counts the moves of moved to state.
func countMoved(moved map[int64]string, state string) int {
	n := 0
	for _, s := range moved {
		if s == state {
			n++
		}
	}
	return n
}

// lifeVerdict is designVerdict for a reservation row.
func (r *result) lifeVerdict() (v, detail string) {
	ev, l := r.dev, r.dev.life
	failed := failedSafety(r.rep)
	facts := fmt.Sprintf("S %d; available %d, reserved %d, sold %d; orders %d pending, %d paid, %d cancelled, %d expired; last wave %d of %d; failed checks %v",
		l.supply, l.available, l.reserved, l.sold, l.pending, l.paid, l.cancelled, l.expired, l.lastBought, l.lastWave, failed)
	if r.design.design == app.DesignLock {
		return r.lockLifeVerdict(failed, facts) // matrix_lifelock.go
	}
	if r.design.fault == faultReturnKill {
		facts += fmt.Sprintf("; killed holding %d unit(s) between the database's return and Redis's, %d of its cancels moved in the database", ev.held, l.victimMoved)
	}
	if ev.missing != "" {
		return "fault not injected", ev.missing + " (" + facts + ")"
	}
	if r.design.fault == faultReturnKill && (ev.held < 1 || int64(l.victimMoved) != ev.held) {
		return "fault not injected", "the victim's units were not all moved in the database (" + facts + ")"
	}
	lost := l.supply - (l.available + l.pending + l.paid)
	ok := false
	switch r.design.outcome {
	case outcomeHolds:
		ok = len(failed) == 0 && len(l.checks) > 0
	case outcomeLosesUnits:
		ok = slices.Equal(failed, []int{3, 5}) && l.reserved-l.pending == ev.held && lost == ev.held
	}
	if !ok {
		return "mismatch", facts
	}
	return "ok", facts
}
