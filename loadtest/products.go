package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// A sale sells Config.Products products at once: created together, the
// buyers spread over them by Config.Skew, read back and checked one by
// one. This file is what a sale does per product: the set-up, the read
// back, the checks, and the report's per-product lines.

// MaxProducts bounds Config.Products: every product is created, read back
// and checked through the API, one request or more each.
const MaxProducts = 100_000

// apiWorkers is how many set-up and read-back requests run at once: enough
// to create or read thousands of products in seconds without taking the
// service's every connection.
const apiWorkers = 16

// setUpOp is one product of the set-up, as created (or read) and when.
type setUpOp struct {
	p         Product
	call, ret time.Time
}

// forEach runs fn(i) for i in [0, n) on up to apiWorkers goroutines and
// returns the first error; after one, the calls not yet started are not
// made.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		next     int
		firstErr error
	)
	for range min(apiWorkers, n) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := firstErr != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// createProducts creates n products of stock each, named after the run
// (prefix), concurrently, and returns them by id: index 0, the first
// created, is the hottest under every Skew.
func createProducts(ctx context.Context, a api, n int, stock int64, prefix string) ([]setUpOp, error) {
	set := make([]setUpOp, n)
	name := fmt.Sprintf("loadtest %s%s", prefix, time.Now().UTC().Format(time.RFC3339))
	err := forEach(ctx, n, func(ctx context.Context, i int) error {
		nm := name
		if n > 1 {
			nm = fmt.Sprintf("%s #%d", name, i+1)
		}
		call := time.Now()
		p, err := a.createProduct(ctx, nm, stock)
		if err != nil {
			return err
		}
		set[i] = setUpOp{p: p, call: call, ret: time.Now()}
		return nil
	})
	slices.SortFunc(set, func(a, b setUpOp) int { return cmp.Compare(a.p.ID, b.p.ID) })
	return set, err
}

// snapshotResult is one product read back after the sale (api.snapshot).
type snapshotResult struct {
	after  Product
	orders []Order
	listed time.Time // when its orders had been listed
	read   time.Time // when its last product read had returned
}

// snapshotAll reads every product of before back, with its orders, as
// api.snapshot does for one.
func snapshotAll(ctx context.Context, a api, before []Product, settle time.Duration) ([]snapshotResult, error) {
	out := make([]snapshotResult, len(before))
	err := forEach(ctx, len(before), func(ctx context.Context, i int) error {
		after, orders, listed, err := a.snapshot(ctx, before[i].ID, settle)
		if err != nil {
			return err
		}
		out[i] = snapshotResult{after: after, orders: orders, listed: listed, read: time.Now()}
		return nil
	})
	return out, err
}

// ProductReport is what one product of a sale came to.
type ProductReport struct {
	// ID is the product; Index its place in the skew (0: the hottest).
	ID    int64
	Index int
	// Before and After are the product before and after the attack.
	Before, After Product
	// Demand is how many fresh buyers were sent to buy it; Requests its
	// purchase requests, Created the 201s, Orders the orders of this run.
	Demand, Requests, Created, Orders int
	// LastPurchase is when its last 201 arrived, SoldOutAt when the first
	// sold_out after it did (zero if none), from the start of the attack.
	LastPurchase, SoldOutAt time.Duration
	// PurchaseLatency covers its 201s.
	PurchaseLatency Latency
	// Restocks is how many restocks of it were mixed into the sale.
	Restocks int
	// Invariants are its own checks (Check).
	Invariants []Invariant
	// Oversold is true when a safety invariant of it failed, Undersold
	// when its liveness check warned.
	Oversold, Undersold bool
}

// S is the product's stock to sell: its stock, reserved and sold before
// the sale.
func (p ProductReport) S() int64 { return supply(p.Before) }

// judgeProducts checks every product on its own and returns the
// per-product reports, by index, and the sale's invariants: each the worst
// status over the products, its detail naming the first product that
// failed it, or the totals when none did.
func judgeProducts(before []Product, snaps []snapshotResult, prefix string, t *tally, b *buyers, side *beside, endedNormally bool) ([]ProductReport, []Invariant) {
	demand := b.demandOf()
	life := side.life
	reserving := life.reserving || slices.ContainsFunc(snaps, func(s snapshotResult) bool {
		return slices.ContainsFunc(s.orders, func(o Order) bool { return !o.ExpiresAt.IsZero() })
	})
	reports := make([]ProductReport, len(before))
	for i, p := range before {
		pt := t.product(p.ID)
		rs := side.of(p.ID)
		created, byUser, unknown := pt.created, pt.createdByUser, pt.unknown
		co := life.closing[p.ID]
		if co != nil {
			created, unknown = created+co.created, unknown+co.unknown
			byUser = maps.Clone(byUser)
			for u, n := range co.createdByUser {
				byUser[u] += n
			}
		}
		inv := Check(Observed{
			Before:        p,
			After:         snaps[i].after,
			Orders:        snaps[i].orders,
			UserPrefix:    prefix,
			Created:       created,
			CreatedByUser: byUser,
			Unknown:       unknown,
			Demand:        demand[i],
			EndedNormally: endedNormally,
			Restocked:     rs.last,
			Restocks:      rs.sent,
			StockUnknown:  !rs.known,
			Reserving:     reserving,
			Moves:         life.moves[p.ID],
			Listed:        snaps[i].listed,
			Lag:           life.cfg.Lag,
			Finished:      co != nil || life.cfg.allPaid(),
		})
		r := ProductReport{ID: p.ID, Index: i, Before: p, After: snaps[i].after, Demand: demand[i],
			Requests: pt.requests, Created: created, Orders: runOrders(snaps[i].orders, prefix),
			LastPurchase: pt.lastCreated, SoldOutAt: pt.soldOutAt(), PurchaseLatency: summarize(pt.purchases),
			Restocks: rs.sent, Invariants: inv, Oversold: Oversold(inv)}
		r.Undersold = slices.ContainsFunc(inv, func(x Invariant) bool { return !x.Safety && x.Status == Warn })
		reports[i] = r
	}
	if len(reports) == 1 {
		return reports, reports[0].Invariants
	}
	total := Observed{UserPrefix: prefix, Unknown: t.unknown, CreatedByUser: maps.Clone(t.createdByUser), EndedNormally: endedNormally,
		Restocks: side.restocksSent(), Reserving: reserving, Lag: life.cfg.Lag}
	for i, r := range reports {
		total.Before = addProducts(total.Before, r.Before)
		total.After = addProducts(total.After, r.After)
		total.Orders = append(total.Orders, snaps[i].orders...)
		total.Moves = append(total.Moves, life.moves[r.ID]...)
		if snaps[i].listed.After(total.Listed) {
			total.Listed = snaps[i].listed
		}
		total.Created += r.Created
		total.Demand += r.Demand
		if co := life.closing[r.ID]; co != nil {
			total.Unknown += co.unknown
			for u, n := range co.createdByUser {
				total.CreatedByUser[u] += n
			}
		}
	}
	return reports, mergeInvariants(reports, total)
}

// addProducts adds b's stock, reserved and sold to a's.
func addProducts(a, b Product) Product {
	a.Stock += b.Stock
	a.Reserved += b.Reserved
	a.Sold += b.Sold
	return a
}

// mergeInvariants folds the products' invariants into the sale's: for
// each, the worst status (FAIL, then WARN, then PASS, then SKIP), with
// the first product (in skew order) that has it and how many do, or,
// when every product passed or skipped it, the check of total: every
// product's numbers summed, as if the sale were of one product.
func mergeInvariants(reports []ProductReport, total Observed) []Invariant {
	rank := map[Status]int{Fail: 3, Warn: 2, Pass: 1, Skip: 0}
	totals := Check(total)
	merged := make([]Invariant, len(reports[0].Invariants))
	for k := range merged {
		m := reports[0].Invariants[k]
		first, count := -1, 0
		for i, r := range reports {
			inv := r.Invariants[k]
			switch {
			case rank[inv.Status] > rank[m.Status]:
				m.Status, first, count = inv.Status, i, 1
			case inv.Status == m.Status:
				count++
				if first < 0 {
					first = i
				}
			}
		}
		switch {
		case m.Status == Fail || m.Status == Warn:
			m.Detail = fmt.Sprintf("product %d: %s; %d of %d products %s this", reports[first].ID,
				reports[first].Invariants[k].Detail, count, len(reports), strings.ToLower(string(m.Status)))
		case !m.Safety:
			m.Detail = livenessSummary(reports)
		default:
			// Conservation with restocks is judged per product, from each
			// product's last restock: the totals have no single one.
			detail := totals[k].Detail
			if m.Number == 3 && total.Restocks > 0 {
				detail = fmt.Sprintf("stock %d + sold %d = %d, each product against its last restock", total.After.Stock, total.After.Sold, total.After.Stock+total.After.Sold)
			}
			m.Detail = fmt.Sprintf("every one of %d products (%d skipped); in total: %s", len(reports), len(reports)-count, detail)
			if m.Status == Skip {
				m.Detail = fmt.Sprintf("skipped for all %d products: %s", len(reports), reports[0].Invariants[k].Detail)
			}
		}
		merged[k] = m
	}
	return merged
}

// livenessSummary says how the products' liveness checks came out.
func livenessSummary(reports []ProductReport) string {
	var sold, less, other int
	for _, r := range reports {
		i := slices.IndexFunc(r.Invariants, func(inv Invariant) bool { return !inv.Safety })
		if i < 0 {
			continue
		}
		inv := r.Invariants[i]
		switch {
		case inv.Status == Pass:
			sold++
		case inv.Status == Skip && int64(r.Demand) <= r.S() && r.Restocks == 0:
			less++
		default:
			other++
		}
	}
	what := "sold out under more demand than stock"
	if slices.ContainsFunc(reports[0].Invariants, func(inv Invariant) bool { return inv.Number > 6 }) {
		// A sale with a window: units come back, and sold out is not over.
		what = "sold every unit under more demand than their supply"
	}
	s := fmt.Sprintf("%d products %s, %d had less demand than stock", sold, what, less)
	if other > 0 {
		s += fmt.Sprintf(", %d not judged (restocked, or the run did not end normally)", other)
	}
	return s
}

// runOrders counts the orders whose user belongs to this run.
func runOrders(orders []Order, prefix string) int {
	n := 0
	for _, o := range orders {
		if strings.HasPrefix(o.UserID, prefix) {
			n++
		}
	}
	return n
}

// hottest returns up to n products of rs, the most demanded first (then by
// skew order).
func hottest(rs []ProductReport, n int) []ProductReport {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b ProductReport) int {
		return cmp.Or(cmp.Compare(b.Demand, a.Demand), cmp.Compare(a.Index, b.Index))
	})
	return out[:min(n, len(out))]
}
