// Package dashboard is the live sale page, GET /dashboard, and the
// timeline behind it. It shows the totals over every product (how many,
// their stock, sold, and how many are sold out), the TopN products with
// the most orders in the window it keeps (Window), each with its stock,
// reserved, sold and orders/s over time, and the rest as one line of sums;
// and for the whole service, orders and purchase outcomes per second, the
// orders that left pending per second (paid, cancelled, expired), lock
// wait p50/p99, fence rejections and lost leases. A sale over thousands of
// products thus shows as ten rows and a line, not thousands of rows.
//
// Which replica answers the page must not matter, so nothing it shows is
// one replica's alone:
//
//   - Stock and sold now come from the shared database, read on every poll.
//   - Everything over time is kept in per-second buckets in the shared
//     Redis (in the redis lock mode): every replica adds its counts to the
//     bucket of the second (HINCRBY on one hash per second, with a TTL), so
//     a bucket holds the sum over the replicas. The lock wait is kept as
//     histogram bucket counts, which add up across replicas, unlike
//     percentiles; p50 and p99 are computed from the sum, as Prometheus's
//     histogram_quantile does. Per product, each replica writes the
//     orders of its sampleTop busiest products of the second, and their
//     stock and sold read from the database once the second has ended;
//     the orders of all its products go into one total. A product's
//     orders in a second where it was not among a replica's busiest count
//     in that total only, so the orders shown per product are exact for
//     the hot products of a skewed sale and a lower bound for the others;
//     stock and sold, and the totals over every product, are the
//     database's.
//   - Without Redis (the local and none lock modes) the buckets stay in the
//     replica's memory, and the page says that it shows that replica only.
//
// Cost: a purchase adds to in-memory counters under a mutex, with no
// round trip of its own. Once per second each replica reads from the
// database, in one statement, the rows of at most sampleTop products (its
// busiest of that second), and writes the seconds that have ended in one
// pipelined round trip: per second with activity, a few HINCRBY for the
// outcomes, waits, orders closed and total orders, one per busiest
// product, one HSET of at most 3*sampleTop+1 fields and one EXPIRE. However many products a
// replica sells in a second, that is at most 3*sampleTop product fields
// and one bounded read; ranking them costs an in-memory sort. A poll needs
// every second of the window, whatever second it asks for, since the
// ranking is over the window. A replica keeps the seconds its polls read
// once no replica writes them any more (settleAfter), so its first poll
// reads one hash per second of the window (one pipelined round trip of
// Window/1s HGETALLs, each of at most 3*sampleTop product fields per
// replica) and the next ones only the last seven or so. A poll then reads
// the TopN products by id in one statement, and the sums over the others
// in another: a sum the database computes over the products table, or,
// in the counter designs, whose numbers are in one Redis counter per
// product, a read of every product and counter (seckill's Inventory).
package dashboard

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
)

var (
	_ seckill.Recorder = (*Dashboard)(nil)
	_ lock.Observer    = (*Dashboard)(nil)
)

// Window is how far back the page's data goes; KeyTTL is how long a
// second's hash stays in Redis, past the window for a page polling late.
const (
	Window = 5 * time.Minute
	KeyTTL = 10 * time.Minute
)

// flushEvery is how often ended seconds are written: the page's data
// trails the present by at most about 1 s plus this.
const flushEvery = 250 * time.Millisecond

// ioTimeout bounds one flush's or one poll's calls to Redis and the
// database, so that a hung dependency delays the page, not the replica's
// shutdown.
const ioTimeout = 2 * time.Second

// WaitBuckets are the upper bounds, in seconds, of the lock-wait buckets
// kept per second, the same as the seckill_lock_wait_seconds histogram's
// (internal/metrics): from 100 µs to 10 s, 1-2.5-5 per decade.
var WaitBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

//go:embed dashboard.html
var page []byte

// TopN is how many products the page lists by name: those with the most
// orders in the window, the hottest of the sale, most first. Ten rows fit
// above the charts on one screen, next to the totals, and hold what a
// person watching a sale looks for: the products selling now and how
// much each has left. With the load test's demand (zipf:1.1) over 2,000
// products, the ten hottest take 45% of the orders.
const TopN = 10

// sampleTop is how many products each replica writes per-product fields
// for, per second: its busiest of that second. Twice TopN, so that a
// product among the TopN of the window keeps its counts in a second where
// a burst on others pushed it down the replica's ranking, short of 2*TopN
// others outselling it.
const sampleTop = 2 * TopN

// Products is what the dashboard reads from the database: a few products
// by id, and the sums over the rest. Neither read grows with the number of
// products sold in a second.
type Products interface {
	// ProductsByID returns the products with these ids, by id, in one
	// read; an id with no product is left out.
	ProductsByID(ctx context.Context, ids []int64) ([]*seckill.Product, error)
	// Inventory sums every product but those whose ids are in except.
	Inventory(ctx context.Context, except []int64) (seckill.Inventory, error)
}

// Dashboard records what one replica does, second by second, and serves
// the page. Use New, then Start once the database (and Redis) are open,
// and Close before closing them. It is safe for concurrent use.
type Dashboard struct {
	id string // this replica, in the buckets: how many replicas reported

	mu      sync.Mutex
	pending map[int64]*bucket // by Unix second, not yet written

	settled *settled // the seconds polls have read that no replica writes any more

	// Set by Start.
	sink     sink
	products Products
	log      *slog.Logger
	stop     chan struct{}
	done     chan struct{}

	closeOnce sync.Once
	now       func() time.Time

	// Owned by the writer goroutine: a dependency that is down would
	// otherwise log a warning every flush.
	lastWarn time.Time
	dropped  int
}

// warnEvery is how often a failing write is logged.
const warnEvery = time.Minute

// New returns a Dashboard that records in memory until Start.
func New() *Dashboard {
	return &Dashboard{id: rand.Text()[:8], pending: map[int64]*bucket{}, settled: newSettled(), now: time.Now}
}

// Start writes the recorded seconds, from now on, to the shared Redis
// client rdb, or, when rdb is nil, keeps them in this replica's memory. It
// reads products from p. Call it once.
func (d *Dashboard) Start(rdb redis.UniversalClient, p Products, log *slog.Logger) {
	if rdb != nil {
		d.sink = &redisSink{rdb: rdb}
	} else {
		d.sink = newMemorySink()
	}
	d.products, d.log = p, log
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	go d.run()
}

// Close stops the writer after writing what is left, including the
// current second. It returns when the writer has stopped; it is safe to
// call more than once, and without Start.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() {
		if d.stop == nil {
			return
		}
		close(d.stop)
		<-d.done
	})
}

// Shared reports whether the buckets are every replica's (in Redis) or
// this replica's only.
func (d *Dashboard) Shared() bool {
	_, ok := d.sink.(*redisSink)
	return ok
}

func (d *Dashboard) run() {
	defer close(d.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			d.flush(d.now().Unix())
		case <-d.stop:
			d.flush(d.now().Unix() + 1)
			return
		}
	}
}

// flush writes every pending second before until (Unix seconds).
func (d *Dashboard) flush(until int64) {
	d.mu.Lock()
	var ready map[int64]*bucket
	for sec, b := range d.pending {
		if sec < until {
			if ready == nil {
				ready = map[int64]*bucket{}
			}
			ready[sec] = b
			delete(d.pending, sec)
		}
	}
	d.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	// Each second's busiest products, and their stock and sold as the
	// database has them now, after the seconds ended, in one read.
	busiest := make(map[int64][]int64, len(ready))
	var ids []int64
	for sec, b := range ready {
		busiest[sec] = b.busiest(sampleTop)
		ids = append(ids, busiest[sec]...)
	}
	samples := map[int64]*seckill.Product{}
	if len(ids) > 0 {
		slices.Sort(ids)
		ps, err := d.products.ProductsByID(ctx, slices.Compact(ids))
		if err != nil {
			d.warn("dashboard: read the busiest products to sample them", 0, err)
		}
		for _, p := range ps {
			samples[p.ID] = p
		}
	}
	var errs []error
	for sec, b := range ready {
		incr, set := b.fields(d.id, busiest[sec], samples)
		if err := d.sink.write(ctx, sec, incr, set); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The page loses these seconds; the sale is not affected.
		d.warn("dashboard: write the timeline to Redis", len(errs), err)
	}
}

// warn logs a failure at most once per warnEvery, with the count of
// seconds lost since the last warning.
func (d *Dashboard) warn(msg string, lost int, err error) {
	d.dropped += lost
	if now := d.now(); now.Sub(d.lastWarn) >= warnEvery {
		d.log.Warn(msg, "seconds_lost", d.dropped, "err", err, "next_warning_in", warnEvery)
		d.lastWarn, d.dropped = now, 0
	}
}

// current returns the bucket of this second, under d.mu.
func (d *Dashboard) current() *bucket {
	sec := d.now().Unix()
	b := d.pending[sec]
	if b == nil {
		b = &bucket{outcomes: map[seckill.Outcome]int64{}, wait: make([]int64, len(WaitBuckets)+1), orders: map[int64]int64{},
			closed: map[seckill.OrderState]int64{}}
		d.pending[sec] = b
	}
	return b
}

// PurchaseDone counts a purchase's outcome (seckill.Recorder).
func (d *Dashboard) PurchaseDone(outcome seckill.Outcome, _ time.Duration) {
	d.mu.Lock()
	d.current().outcomes[outcome]++
	d.mu.Unlock()
}

// FenceRejected counts a write the fence refused (seckill.Recorder).
func (d *Dashboard) FenceRejected(seckill.FenceStage) {
	d.mu.Lock()
	d.current().fenceRejected++
	d.mu.Unlock()
}

// BatchDone is not shown (seckill.Recorder).
func (d *Dashboard) BatchDone(int) {}

// ExpiriesInProgress is not shown (seckill.Recorder): the dashboard draws
// what the sale did, and an expiry in progress has done nothing yet.
func (d *Dashboard) ExpiriesInProgress(int) {}

// OrdersClosed counts n orders that left pending for state: paid,
// cancelled or expired (seckill.Recorder).
func (d *Dashboard) OrdersClosed(state seckill.OrderState, n int) {
	d.mu.Lock()
	d.current().closed[state] += int64(n)
	d.mu.Unlock()
}

// OrdersPlaced counts n orders committed for a product: called by the
// wiring's store, once the transaction that wrote them has committed.
func (d *Dashboard) OrdersPlaced(productID int64, n int) {
	d.mu.Lock()
	d.current().orders[productID] += int64(n)
	d.mu.Unlock()
}

// Acquired counts a lock wait in its bucket (lock.Observer).
func (d *Dashboard) Acquired(_ string, wait time.Duration, _ bool) {
	i := waitBucket(wait.Seconds())
	d.mu.Lock()
	d.current().wait[i]++
	d.mu.Unlock()
}

// LeaseLost counts a lease lost while held (lock.Observer).
func (d *Dashboard) LeaseLost(string) {
	d.mu.Lock()
	d.current().leasesLost++
	d.mu.Unlock()
}

// AcquireFailed, Released and RenewalFailed are not shown (lock.Observer).
func (d *Dashboard) AcquireFailed(string, time.Duration, error) {}
func (d *Dashboard) Released(string, time.Duration)             {}
func (d *Dashboard) RenewalFailed(string, error)                {}

// waitBucket is the index of the first bound at or above s.
func waitBucket(s float64) int {
	for i, le := range WaitBuckets {
		if s <= le {
			return i
		}
	}
	return len(WaitBuckets)
}

// Page is the HTML page (handlers.Dashboard).
func (d *Dashboard) Page() []byte { return page }
