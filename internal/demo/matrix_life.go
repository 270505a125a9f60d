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

	"github.com/seckill-ref/seckill/loadtest"
)

// The reservation rows of the matrix: a sale with a payment window on the
// designs without a lock that have one, driven by the row's own client,
// so that the kill row knows exactly what its victim holds (the load
// test's buyers, in the demo's -window sale, move at random times on
// random replicas): buyers reserve, a third of
// the orders is paid, a third cancelled and a third left to lapse, the
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
//
// The kill row is redis-counter's guarantee it cannot keep: a cancel or
// an expiry moves the order in the database, then gives the unit back to
// the counter in Redis, and a replica killed between the two loses the
// unit. The victim, a process of its own, pauses there (CHAOS_EXPIRY_PAUSE);
// it is sent victimCancels cancels, killed with SIGKILL once its
// seckill_units_returning gauge (its /metrics) shows all of them between
// the two writes, and the checks must then fail exactly 3 and 5, by
// exactly those units: the counter keeps them reserved for orders that
// are cancelled, and nobody can buy them.

// Settings of the reservation rows.
const (
	// lifeWindow is the rows' payment window: long enough for the pays,
	// the cancels and the kill to come before it ends.
	lifeWindow = 4 * time.Second
	// victimCancels is how many cancels the kill row sends the victim.
	victimCancels = 3
	// lifeWorkers bounds the row's client's requests in flight.
	lifeWorkers = 16
)

// lifeEvidence is what a reservation row's sale ended with.
type lifeEvidence struct {
	supply int64 // S: the stock the product was created with
	// The product as the API reports it at the end.
	available, reserved, sold int64
	// The orders listed at the end, by state.
	pending, paid, cancelled, expired int64
	// created counts the 201s; lastWave the last wave's buyers and
	// lastBought those of them who got one.
	created, lastWave, lastBought int
	// victimMoved counts the cancels sent to the victim whose orders the
	// database shows cancelled.
	victimMoved int
	checks      []loadtest.Invariant
}

// runLifeRow runs a reservation row's sale into res.
func runLifeRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	start := time.Now()
	cfg := res.designConfig(o, rds.addr)
	cfg.PayWindow = lifeWindow
	logger = logger.With("design", res.design.design, "fault", res.fault)
	specs := []replicaSpec{{cfg: cfg}, {cfg: cfg}}
	kill := res.design.fault == faultReturnKill
	if kill {
		if o.command == nil {
			res.err = errors.New("the kill rows need replicas as processes of their own (no replica command)")
			return
		}
		victim := cfg
		victim.ChaosExpiryPause, victim.ChaosProb = victimPause, 1
		// Its own expiry never runs before the kill: what it holds then
		// is the cancels sent to it, and nothing else.
		victim.ExpireInterval = time.Hour
		specs[1] = replicaSpec{cfg: victim, command: o.command}
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
	res.dev, res.err = lifeSale(ctx, o.sale.Stock, c, cfg.AdminToken, kill, &res.output)
	res.ran = ctx.Err() == nil
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

// lifeSale is the sale of a reservation row on c, whose replica 1 (c's
// first URL) runs in this process; with kill, replica 2 is the victim.
func lifeSale(ctx context.Context, stock int64, c *cluster, token string, kill bool, w io.Writer) (designEvidence, error) {
	var ev designEvidence
	lev := &ev.life
	lev.supply = stock
	// A transport of its own, whose idle connections are closed at the
	// end: a connection dialled and never used would hold up the
	// replicas' graceful shutdown.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: lifeWorkers}}
	defer hc.CloseIdleConnections()
	a, b := newLifeClient(hc, c.urls[0], token), newLifeClient(hc, c.urls[1], token)
	if _, err := a.CreateProduct(ctx, "reserved phone", stock); err != nil {
		return ev, err
	}
	// Wave 1: more buyers than units, on both replicas.
	users := make([]string, stock+stock/4)
	for i := range users {
		users[i] = fmt.Sprintf("buyer-%d", i)
	}
	var mu sync.Mutex
	var orders []lifeOrder
	err := each(users, func(i int, u string) error {
		cl := a
		if i%2 == 1 {
			cl = b
		}
		o, err := cl.reserve(ctx, u)
		if err != nil || o == nil {
			return err
		}
		mu.Lock()
		orders = append(orders, *o)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return ev, err
	}
	lev.created = len(orders)
	slices.SortFunc(orders, func(x, y lifeOrder) int { return int(x.ID - y.ID) })
	var pays, cancels []lifeOrder
	for i, o := range orders {
		switch i % 3 {
		case 0:
			pays = append(pays, o)
		case 1:
			cancels = append(cancels, o)
		} // case 2: left to lapse
	}
	fmt.Fprintf(w, "wave 1: %d buyers, %d reserved of %d; paying %d, cancelling %d, %d left to lapse\n",
		len(users), len(orders), stock, len(pays), len(cancels), len(orders)-len(pays)-len(cancels))
	if kill {
		if len(cancels) < victimCancels {
			ev.missing = fmt.Sprintf("only %d orders to cancel, %d needed", len(cancels), victimCancels)
			return ev, nil
		}
		var sent []lifeOrder
		sent, cancels = cancels[:victimCancels], cancels[victimCancels:]
		ev.held, ev.missing = killMidReturn(ctx, c, b, sent, w)
		if ev.missing != "" {
			return ev, nil
		}
		_, listed, err := a.state(ctx)
		if err != nil {
			return ev, err
		}
		for _, o := range listed {
			if slices.ContainsFunc(sent, func(s lifeOrder) bool { return s.ID == o.ID }) && o.State == "cancelled" {
				lev.victimMoved++
			}
		}
		b = a // the victim is gone
	}
	if err := each(pays, func(_ int, o lifeOrder) error { return a.move(ctx, "pay", o) }); err != nil {
		return ev, err
	}
	if err := each(cancels, func(_ int, o lifeOrder) error { return b.move(ctx, "cancel", o) }); err != nil {
		return ev, err
	}
	// The replicas' expiry, and nothing else, ends the lapsed orders.
	err = awaitFault(ctx, func() (bool, error) {
		_, listed, err := a.state(ctx)
		return err == nil && !slices.ContainsFunc(listed, func(o lifeOrder) bool { return o.State == "pending" }), err
	})
	if err != nil {
		return ev, fmt.Errorf("the lapsed orders were never expired: %w", err)
	}
	// The last wave: new buyers for every unit of the supply; they get
	// what is on sale, and no more.
	last := make([]string, stock)
	for i := range last {
		last[i] = fmt.Sprintf("last-%d", i)
	}
	var bought sync.Map
	err = each(last, func(_ int, u string) error {
		o, err := a.reserve(ctx, u)
		if o != nil {
			bought.Store(u, o.ID)
		}
		return err
	})
	if err != nil {
		return ev, err
	}
	lev.lastWave = len(last)
	bought.Range(func(any, any) bool { lev.lastBought++; return true })
	lev.created += lev.lastBought
	p, listed, err := a.state(ctx)
	if err != nil {
		return ev, err
	}
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
	lev.checks = lifeChecks(*lev, listed)
	fmt.Fprintf(w, "last wave: %d new buyers, %d reserved; the product: available %d, reserved %d, sold %d; orders: %d pending, %d paid, %d cancelled, %d expired\n",
		lev.lastWave, lev.lastBought, lev.available, lev.reserved, lev.sold, lev.pending, lev.paid, lev.cancelled, lev.expired)
	for _, inv := range lev.checks {
		fmt.Fprintf(w, "  %d. %-46s %s  %s\n", inv.Number, inv.Name, inv.Status, inv.Detail)
	}
	return ev, nil
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
		_ = each(sent, func(_ int, o lifeOrder) error { return victim.move(ctx, "cancel", o) })
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
	}
}

// lifeVerdict is designVerdict for a reservation row.
func (r *result) lifeVerdict() (v, detail string) {
	ev, l := r.dev, r.dev.life
	failed := failedSafety(r.rep)
	facts := fmt.Sprintf("S %d; available %d, reserved %d, sold %d; orders %d pending, %d paid, %d cancelled, %d expired; last wave %d of %d; failed checks %v",
		l.supply, l.available, l.reserved, l.sold, l.pending, l.paid, l.cancelled, l.expired, l.lastBought, l.lastWave, failed)
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
