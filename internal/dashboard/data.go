package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// Data is what the page polls, as JSON.
type Data struct {
	// Now is the answering replica's clock, in Unix milliseconds.
	Now int64 `json:"now"`
	// Scope is "shared" when Seconds sum every replica's counts (kept in
	// Redis), "replica" when they are the answering replica's only.
	Scope string `json:"scope"`
	// WindowSeconds is how far back Seconds can go.
	WindowSeconds int `json:"window_seconds"`
	// WaitBuckets are the upper bounds, in seconds, of Second.Wait.
	WaitBuckets []float64 `json:"wait_buckets"`
	// Inventory sums every product, as the shared database has them for
	// this answer: Top's sums plus Others.
	Inventory Inventory `json:"inventory"`
	// Top are the products with the most orders in the last Window (the
	// hottest of the sale), at most TopN, most first, ties by id, each as
	// the database has it for this answer. A product with no order in the
	// window is not among them.
	Top []Product `json:"top"`
	// Others sums the products not in Top, read just after them: each
	// product counts once, in Top or here, as one read found it.
	Others Inventory `json:"others"`
	// Seconds are the seconds from the one asked for to now that have
	// anything in them, oldest first. The current second is not complete
	// yet, nor the one before it until every replica has written it.
	Seconds []Second `json:"seconds"`
	// Totals sum Seconds.
	Totals Totals `json:"totals"`
}

// Inventory sums a set of products.
type Inventory struct {
	Products int64 `json:"products"`
	Stock    int64 `json:"stock"`
	// Reserved counts the units of pending orders (with a payment window).
	Reserved int64 `json:"reserved"`
	Sold     int64 `json:"sold"`
	// SoldOut counts the products with no stock left.
	SoldOut int64 `json:"sold_out"`
}

func inventory(i seckill.Inventory) Inventory {
	return Inventory{Products: i.Products, Stock: i.Stock, Reserved: i.Reserved, Sold: i.Sold, SoldOut: i.SoldOut}
}

// Product is one of Top: as the database has it now, and its orders in
// the window.
type Product struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Stock    int64  `json:"stock"`
	Reserved int64  `json:"reserved"`
	Sold     int64  `json:"sold"`
	// Orders counts the product's orders in the last Window, summed over
	// the seconds in which it was among a replica's sampleTop busiest. A
	// second in which sampleTop others sold as much or more on that
	// replica is left out, so it is a lower bound, exact for the hot
	// products of a skewed sale.
	Orders int64 `json:"orders"`
}

// Second is one second of the timeline.
type Second struct {
	T int64 `json:"t"` // Unix seconds
	// Replicas is how many replicas reported this second.
	Replicas int `json:"replicas"`
	// Outcomes counts purchases by outcome (seckill.Outcome).
	Outcomes map[string]int64 `json:"outcomes"`
	// Closed counts the orders that left pending in this second, by the
	// state they went to: paid, cancelled or expired.
	Closed map[string]int64 `json:"closed"`
	// Acquired counts lock acquisitions, and Wait them by how long they
	// waited: one count per WaitBuckets bound (at most that long, more
	// than the bound before), and one for longer than the last. WaitP50
	// and WaitP99 are estimated from Wait, in seconds (nil without any).
	Acquired      int64    `json:"acquired"`
	Wait          []int64  `json:"wait"`
	WaitP50       *float64 `json:"wait_p50"`
	WaitP99       *float64 `json:"wait_p99"`
	FenceRejected int64    `json:"fence_rejected"`
	LeasesLost    int64    `json:"leases_lost"`
	// Orders counts the orders committed in this second, every product.
	Orders int64 `json:"orders"`
	// Products are, by id, the products sold in this second that were
	// among a replica's sampleTop busiest of the second; a product is
	// here with the orders of the replicas where it was.
	Products map[string]ProductSecond `json:"products,omitempty"`
}

// ProductSecond is one product in one second: the orders committed, and
// its stock, reserved and sold as read from the database just after the
// second.
type ProductSecond struct {
	Orders int64  `json:"orders"`
	Stock  *int64 `json:"stock,omitempty"`
	Sold   *int64 `json:"sold,omitempty"`
	// Reserved is there when the sample found units reserved; a sample
	// with stock and sold but no reserved found none.
	Reserved *int64 `json:"reserved,omitempty"`
}

// Totals are the sums over the seconds returned.
type Totals struct {
	Outcomes      map[string]int64 `json:"outcomes"`
	Closed        map[string]int64 `json:"closed"`
	Acquired      int64            `json:"acquired"`
	WaitP50       *float64         `json:"wait_p50"`
	WaitP99       *float64         `json:"wait_p99"`
	FenceRejected int64            `json:"fence_rejected"`
	LeasesLost    int64            `json:"leases_lost"`
}

// Data reads the seconds of the window, ranks the products by their
// orders in it, and reads the TopN and the sums over the others from the
// database (handlers.Dashboard). Its Seconds go from since (at most
// Window ago) to now.
func (d *Dashboard) Data(ctx context.Context, since time.Time) (any, error) {
	if d.sink == nil {
		return nil, fmt.Errorf("dashboard: not started")
	}
	ctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	now := d.now()
	start := now.Add(-Window).Unix()
	stored, err := d.window(ctx, start, now.Unix())
	if err != nil {
		return nil, err
	}
	ids, orders := hottest(stored, TopN)
	top, err := d.products.ProductsByID(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	others, err := d.products.Inventory(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	out := &Data{Now: now.UnixMilli(), Scope: "replica", WindowSeconds: int(Window.Seconds()), WaitBuckets: WaitBuckets,
		Top: make([]Product, 0, len(top)), Others: inventory(others)}
	if d.Shared() {
		out.Scope = "shared"
	}
	all := others
	byID := make(map[int64]*seckill.Product, len(top))
	for _, p := range top {
		byID[p.ID] = p
		all.Add(p)
	}
	out.Inventory = inventory(all)
	for _, id := range ids {
		if p, ok := byID[id]; ok {
			out.Top = append(out.Top, Product{ID: p.ID, Name: p.Name, Stock: p.Stock, Reserved: p.Reserved, Sold: p.Sold, Orders: orders[id]})
		}
	}
	from := max(since.Unix(), start)
	for t := range stored {
		if t < from {
			delete(stored, t)
		}
	}
	out.Seconds, out.Totals = decode(stored)
	return out, nil
}

// window returns the stored fields of every second from start to now
// that has any: those settled, from d.settled, and the others read.
func (d *Dashboard) window(ctx context.Context, start, now int64) (map[int64]map[string]int64, error) {
	kept, next := d.settled.get(start)
	read, err := d.sink.read(ctx, next, now)
	if err != nil {
		return nil, err
	}
	d.settled.put(read, now-1-int64(settleAfter.Seconds()))
	for t, fields := range read {
		kept[t] = fields
	}
	return kept, nil
}

// hottest returns the ids of the (at most) n products with the most
// orders in the stored seconds, most first, ties by id, and their orders.
func hottest(stored map[int64]map[string]int64, n int) ([]int64, map[int64]int64) {
	orders := map[int64]int64{}
	for _, fields := range stored {
		for f, v := range fields {
			if !strings.HasPrefix(f, fieldOrders) {
				continue
			}
			if id, err := strconv.ParseInt(f[len(fieldOrders):], 10, 64); err == nil {
				orders[id] += v
			}
		}
	}
	ids := slices.Collect(maps.Keys(orders))
	slices.SortFunc(ids, func(x, y int64) int {
		return cmp.Or(cmp.Compare(orders[y], orders[x]), cmp.Compare(x, y))
	})
	ids = ids[:min(n, len(ids))]
	top := make(map[int64]int64, len(ids))
	for _, id := range ids {
		top[id] = orders[id]
	}
	return ids, top
}

// decode turns the stored fields into Seconds, oldest first, and their
// totals.
func decode(stored map[int64]map[string]int64) ([]Second, Totals) {
	secs := slices.Sorted(func(yield func(int64) bool) {
		for t := range stored {
			if !yield(t) {
				return
			}
		}
	})
	out := make([]Second, 0, len(secs))
	tot := Totals{Outcomes: zeroOutcomes(), Closed: zeroClosed()}
	totalWait := make([]int64, len(WaitBuckets)+1)
	for _, t := range secs {
		s := Second{T: t, Outcomes: zeroOutcomes(), Closed: zeroClosed()}
		wait := make([]int64, len(WaitBuckets)+1)
		for f, v := range stored[t] {
			switch {
			case strings.HasPrefix(f, fieldOutcome):
				s.Outcomes[f[len(fieldOutcome):]] += v
			case strings.HasPrefix(f, fieldClosed):
				s.Closed[f[len(fieldClosed):]] += v
			case strings.HasPrefix(f, fieldWait):
				if i, err := strconv.Atoi(f[len(fieldWait):]); err == nil && i >= 0 && i < len(wait) {
					wait[i] += v
				}
			case f == fieldFence:
				s.FenceRejected = v
			case f == fieldLost:
				s.LeasesLost = v
			case f == fieldOrdersAll:
				s.Orders = v
			case strings.HasPrefix(f, fieldReplica):
				s.Replicas++
			case strings.HasPrefix(f, fieldOrders), strings.HasPrefix(f, fieldStock), strings.HasPrefix(f, fieldSold), strings.HasPrefix(f, fieldReserved):
				i := strings.IndexByte(f, ':')
				if s.Products == nil {
					s.Products = map[string]ProductSecond{}
				}
				ps := s.Products[f[i+1:]]
				switch f[:i+1] {
				case fieldOrders:
					ps.Orders = v
				case fieldStock:
					ps.Stock = &v
				case fieldSold:
					ps.Sold = &v
				case fieldReserved:
					ps.Reserved = &v
				}
				s.Products[f[i+1:]] = ps
			}
		}
		for i, n := range wait {
			s.Acquired += n
			totalWait[i] += n
		}
		s.Wait = wait
		s.WaitP50, s.WaitP99 = Quantile(0.5, wait), Quantile(0.99, wait)
		for o, n := range s.Outcomes {
			tot.Outcomes[o] += n
		}
		for st, n := range s.Closed {
			tot.Closed[st] += n
		}
		tot.Acquired += s.Acquired
		tot.FenceRejected += s.FenceRejected
		tot.LeasesLost += s.LeasesLost
		out = append(out, s)
	}
	tot.WaitP50, tot.WaitP99 = Quantile(0.5, totalWait), Quantile(0.99, totalWait)
	return out, tot
}

// zeroClosed is the orders closed by state, each at 0.
func zeroClosed() map[string]int64 {
	return map[string]int64{string(seckill.OrderPaid): 0, string(seckill.OrderCancelled): 0, string(seckill.OrderExpired): 0}
}

func zeroOutcomes() map[string]int64 {
	m := make(map[string]int64, len(seckill.Outcomes))
	for _, o := range seckill.Outcomes {
		m[string(o)] = 0
	}
	return m
}

// Quantile estimates the q-quantile (0 < q < 1) of the waits counted in
// counts, one count per WaitBuckets bound and one past the last, as
// Prometheus's histogram_quantile does: find the bucket holding the rank
// and interpolate linearly inside it, from 0 for the first bucket; a rank
// past the last bound gives the last bound. Nil when counts are all zero.
func Quantile(q float64, counts []int64) *float64 {
	var total int64
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return nil
	}
	rank := q * float64(total)
	var below int64
	for i, n := range counts {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		if i == len(WaitBuckets) {
			v := WaitBuckets[len(WaitBuckets)-1]
			return &v
		}
		lo := 0.0
		if i > 0 {
			lo = WaitBuckets[i-1]
		}
		v := lo + (WaitBuckets[i]-lo)*(rank-float64(below))/float64(n)
		v = math.Round(v*1e7) / 1e7 // 0.1 µs: more digits would only be noise
		return &v
	}
	v := WaitBuckets[len(WaitBuckets)-1]
	return &v
}
