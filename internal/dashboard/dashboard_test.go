package dashboard_test

import (
	"context"
	"maps"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/store"
)

// openStore is a real SQLite file with one product of stock 10, of which
// sold have been sold.
func openStore(t *testing.T, sold int) (*store.Store, int64) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "seckill.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	p := &seckill.Product{Name: "phone", Stock: 10}
	if err := st.CreateProduct(ctx, p); err != nil {
		t.Fatal(err)
	}
	for i := range sold {
		if err := st.InsertOrder(ctx, &seckill.Order{ProductID: p.ID, UserID: "u" + strconv.Itoa(i), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetStock(ctx, p.ID, 10-int64(sold)); err != nil {
		t.Fatal(err)
	}
	return st, p.ID
}

// replicaWork is what one replica records: two purchases, one busy, waits
// of 0.3 ms and 2 ms, a fence rejection, and two orders of product id.
func replicaWork(d *dashboard.Dashboard, id int64) {
	d.PurchaseDone(seckill.OutcomeCreated, time.Millisecond)
	d.PurchaseDone(seckill.OutcomeCreated, time.Millisecond)
	d.PurchaseDone(seckill.OutcomeBusy, time.Second)
	d.Acquired("product:1", 300*time.Microsecond, false)
	d.Acquired("product:1", 2*time.Millisecond, true)
	d.FenceRejected(seckill.FenceClaim)
	d.OrdersPlaced(id, 2)
}

// sum adds up the seconds' field f.
func sum(secs []dashboard.Second, f func(dashboard.Second) int64) int64 {
	var n int64
	for _, s := range secs {
		n += f(s)
	}
	return n
}

func data(t *testing.T, d *dashboard.Dashboard) *dashboard.Data {
	t.Helper()
	v, err := d.Data(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return v.(*dashboard.Data)
}

// Two replicas write their seconds to one Redis; a third replica, which
// recorded nothing, answers the page with both replicas' counts summed:
// which replica answers does not matter.
func TestSharedTimeline(t *testing.T) {
	r := redistest.Start(t)
	st, id := openStore(t, 4)
	a, b, c := dashboard.New(), dashboard.New(), dashboard.New()
	for _, d := range []*dashboard.Dashboard{a, b, c} {
		d.Start(r.Client(), st, nil)
		t.Cleanup(d.Close)
	}
	replicaWork(a, id)
	replicaWork(b, id)
	b.LeaseLost("product:1")
	// Close writes what is pending, the current second included.
	a.Close()
	b.Close()

	got := data(t, c)
	if got.Scope != "shared" {
		t.Errorf("scope: got %q, want shared", got.Scope)
	}
	if len(got.Top) != 1 || got.Top[0].Stock != 6 || got.Top[0].Sold != 4 || got.Top[0].Orders != 4 {
		t.Errorf("top: got %+v, want one product with stock 6, sold 4 (the database's) and 4 orders", got.Top)
	}
	if want := (dashboard.Inventory{Products: 1, Stock: 6, Sold: 4}); got.Inventory != want || got.Others != (dashboard.Inventory{}) {
		t.Errorf("inventory %+v, others %+v; want %+v and none", got.Inventory, got.Others, want)
	}
	secs := got.Seconds
	if n := sum(secs, func(s dashboard.Second) int64 { return s.Outcomes["created"] }); n != 4 {
		t.Errorf("created: got %d, want 4 (2 per replica)", n)
	}
	if got.Totals.Outcomes["busy"] != 2 || got.Totals.Outcomes["sold_out"] != 0 {
		t.Errorf("totals: got %v, want busy 2 and sold_out present at 0", got.Totals.Outcomes)
	}
	if got.Totals.Acquired != 4 || got.Totals.FenceRejected != 2 || got.Totals.LeasesLost != 1 {
		t.Errorf("totals: got %+v, want 4 acquisitions, 2 fence rejections, 1 lost lease", got.Totals)
	}
	// The four waits: two in (0.25, 0.5] ms, two in (1, 2.5] ms. The median
	// rank, 2, is the top of the first of those buckets.
	if p := got.Totals.WaitP50; p == nil || math.Abs(*p-0.0005) > 1e-9 {
		t.Errorf("wait p50: got %v, want 0.0005", p)
	}
	if p := got.Totals.WaitP99; p == nil || *p <= 0.001 || *p > 0.0025 {
		t.Errorf("wait p99: got %v, want in (0.001, 0.0025]", p)
	}
	var orders int64
	replicas := 0
	for _, s := range secs {
		ps, ok := s.Products[strconv.FormatInt(id, 10)]
		if !ok {
			continue
		}
		orders += ps.Orders
		if ps.Stock == nil || *ps.Stock != 6 || ps.Sold == nil || *ps.Sold != 4 {
			t.Errorf("second %d: sample %+v, want stock 6 and sold 4 read from the database", s.T, ps)
		}
		replicas = max(replicas, s.Replicas)
	}
	if all := sum(secs, func(s dashboard.Second) int64 { return s.Orders }); orders != 4 || all != 4 || replicas != 2 {
		t.Errorf("orders: got %d of the product and %d in all from %d replicas, want 4, 4 from 2", orders, all, replicas)
	}
}

// The orders that left pending, by the state they went to, summed over
// the replicas, and the units reserved: in the inventory, in the top
// product, and in each second's sample of it.
func TestOrdersClosedAndReserved(t *testing.T) {
	r := redistest.Start(t)
	st, id := openStore(t, 4)
	ctx := context.Background()
	for i := range 2 { // two pending orders: 2 units reserved
		o := &seckill.Order{ProductID: id, UserID: "p" + strconv.Itoa(i), CreatedAt: time.Now(), State: seckill.OrderPending, ExpiresAt: time.Now().Add(time.Hour)}
		if err := st.InsertOrder(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetStock(ctx, id, 4); err != nil {
		t.Fatal(err)
	}
	a, b := dashboard.New(), dashboard.New()
	for _, d := range []*dashboard.Dashboard{a, b} {
		d.Start(r.Client(), st, nil)
		t.Cleanup(d.Close)
	}
	for _, d := range []*dashboard.Dashboard{a, b} {
		d.OrdersPlaced(id, 1)
		d.OrdersClosed(seckill.OrderPaid, 2)
		d.OrdersClosed(seckill.OrderExpired, 3)
	}
	a.OrdersClosed(seckill.OrderCancelled, 1)
	a.Close()
	b.Close()

	got := data(t, a)
	if want := map[string]int64{"paid": 4, "cancelled": 1, "expired": 6}; !maps.Equal(got.Totals.Closed, want) {
		t.Errorf("orders closed: got %v, want %v", got.Totals.Closed, want)
	}
	if n := sum(got.Seconds, func(s dashboard.Second) int64 { return s.Closed["expired"] }); n != 6 {
		t.Errorf("expired, summed over the seconds: got %d, want 6", n)
	}
	if want := (dashboard.Inventory{Products: 1, Stock: 4, Reserved: 2, Sold: 4}); got.Inventory != want {
		t.Errorf("inventory: got %+v, want %+v", got.Inventory, want)
	}
	if len(got.Top) != 1 || got.Top[0].Reserved != 2 {
		t.Errorf("top: got %+v, want the product with 2 reserved", got.Top)
	}
	for _, s := range got.Seconds {
		if ps, ok := s.Products[strconv.FormatInt(id, 10)]; ok && (ps.Reserved == nil || *ps.Reserved != 2) {
			t.Errorf("second %d: sample %+v, want 2 reserved", s.T, ps)
		}
	}
}

// The control: without Redis each replica keeps its own seconds, and a
// replica that recorded nothing has nothing to show. The page says so.
func TestLocalTimelineIsPerReplica(t *testing.T) {
	st, id := openStore(t, 0)
	a, c := dashboard.New(), dashboard.New()
	a.Start(nil, st, nil)
	c.Start(nil, st, nil)
	t.Cleanup(a.Close)
	t.Cleanup(c.Close)
	replicaWork(a, id)
	a.Close()

	if got := data(t, c); got.Scope != "replica" || len(got.Seconds) != 0 {
		t.Errorf("the other replica: got scope %q and %d seconds, want replica and none", got.Scope, len(got.Seconds))
	}
	// a itself shows what it recorded, after Close as before.
	got := data(t, a)
	if got.Totals.Outcomes["created"] != 2 || got.Totals.Acquired != 2 {
		t.Errorf("the replica itself: got %+v, want 2 created, 2 acquisitions", got.Totals)
	}
}

// Seconds are written while the replica runs, not only at Close: the page
// sees a second about a second after it ended.
func TestTimelineFlushesWhileRunning(t *testing.T) {
	r := redistest.Start(t)
	st, id := openStore(t, 0)
	a, c := dashboard.New(), dashboard.New()
	a.Start(r.Client(), st, nil)
	c.Start(r.Client(), st, nil)
	t.Cleanup(a.Close)
	t.Cleanup(c.Close)
	a.OrdersPlaced(id, 3)
	poll.Eventually(t, 10*time.Second, "the other replica to see 3 orders", func() bool {
		got := data(t, c)
		return sum(got.Seconds, func(s dashboard.Second) int64 { return s.Products[strconv.FormatInt(id, 10)].Orders }) == 3
	})
}

func TestQuantile(t *testing.T) {
	counts := func(pairs ...int) []int64 {
		c := make([]int64, len(dashboard.WaitBuckets)+1)
		for i := 0; i < len(pairs); i += 2 {
			c[pairs[i]] = int64(pairs[i+1])
		}
		return c
	}
	last := len(dashboard.WaitBuckets)
	for _, tt := range []struct {
		name   string
		q      float64
		counts []int64
		want   float64
	}{
		// 10 waits in (1 ms, 2.5 ms]: the median is halfway through.
		{"inside a bucket", 0.5, counts(4, 10), 0.00175},
		// The first bucket interpolates from 0.
		{"first bucket", 0.5, counts(0, 4), 0.00005},
		// 99 fast waits and one slow: p99 is the top of the fast bucket.
		{"p99 at a bucket's top", 0.99, counts(0, 99, 10, 1), 0.0001},
		{"past the last bound", 0.99, counts(last, 5), 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := dashboard.Quantile(tt.q, tt.counts)
			if got == nil || math.Abs(*got-tt.want) > 1e-9 {
				t.Errorf("got %v, want %g", got, tt.want)
			}
		})
	}
	if got := dashboard.Quantile(0.5, counts()); got != nil {
		t.Errorf("no waits: got %v, want nil", *got)
	}
}

// hgetalls is how many HGETALLs the Redis server has run since the last
// call: a poll's reads of the seconds.
func hgetalls(t *testing.T, r *redistest.Server) int {
	t.Helper()
	ctx := context.Background()
	c := r.Client()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	_, stats, ok := strings.Cut(info, "cmdstat_hgetall:calls=")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(stats[:strings.IndexByte(stats, ',')])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A poll reads every second of the window from Redis once; the next reads
// only the seconds a replica may still write, and sees what was written
// to them since, with the older seconds as the first poll read them.
func TestPollReadsOnlyUnsettledSeconds(t *testing.T) {
	r := redistest.Start(t)
	st, id := openStore(t, 0)
	var clock atomic.Int64
	start := time.Now().Unix()
	clock.Store(start)
	a, c := dashboard.New(), dashboard.New()
	for _, d := range []*dashboard.Dashboard{a, c} {
		dashboard.SetClock(d, func() time.Time { return time.Unix(clock.Load(), 0) })
		d.Start(r.Client(), st, nil)
		t.Cleanup(d.Close)
	}
	// Orders in the first second and 20 s later, written as each ends.
	key := strconv.FormatInt(id, 10)
	a.OrdersPlaced(id, 3)
	clock.Add(20)
	a.OrdersPlaced(id, 4)
	clock.Add(1)
	poll.Eventually(t, 10*time.Second, "a to write both seconds", func() bool {
		n, err := r.Client().Exists(context.Background(), dashboard.KeyPrefix+strconv.FormatInt(start+20, 10)).Result()
		return err == nil && n == 1
	})

	hgetalls(t, r)
	first := data(t, c)
	if n := hgetalls(t, r); n != int(dashboard.Window.Seconds())+1 {
		t.Errorf("the first poll read %d seconds, want the window's %d", n, int(dashboard.Window.Seconds())+1)
	}
	// One more order, in the second that just ended, which the first poll
	// read as it was then.
	clock.Add(-1)
	a.OrdersPlaced(id, 5)
	clock.Add(1)
	a.Close()
	second := data(t, c)
	if n := hgetalls(t, r); n > 10 {
		t.Errorf("the second poll read %d seconds, want the few a replica may still write", n)
	}
	for i, got := range []*dashboard.Data{first, second} {
		want := []int64{7, 12}[i]
		inSeconds := sum(got.Seconds, func(s dashboard.Second) int64 { return s.Products[key].Orders })
		if len(got.Top) != 1 || got.Top[0].Orders != want || inSeconds != want {
			t.Errorf("poll %d: got top %+v and %d orders in the seconds, want %d orders of product %d", i+1, got.Top, inSeconds, want, id)
		}
	}
}
