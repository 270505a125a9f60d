// Package metrics counts what the service, its lock and its HTTP API do,
// in Prometheus metrics served by GET /metrics. It is the only package
// that knows the Prometheus client library: the domain and the lock report
// through their own small interfaces, which Metrics implements.
//
//   - lock.Observer: acquisitions, waits, holds, renewal failures and lost
//     leases;
//   - seckill.Recorder: purchases by outcome and duration, batch sizes,
//     the writes the fence refused, reservations closed and expiries in
//     progress;
//   - seckill.CounterRecorder: in the counter designs, counters built
//     from the database, orders taken and not yet written, orders a
//     writer wrote or took over;
//   - RequestDone, for the HTTP API's middleware: requests by route and
//     status; KeyClaimed, for its idempotency keys: replays and conflicts.
//
// Every Metrics has a registry of its own, not the library's global one:
// several replicas run in one process (the demo, the tests), and each must
// count only its own requests.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
)

var (
	_ lock.Observer           = (*Metrics)(nil)
	_ seckill.Recorder        = (*Metrics)(nil)
	_ seckill.CounterRecorder = (*Metrics)(nil)
)

// DurationBuckets are the upper bounds, in seconds, of every duration
// histogram: lock wait, lock hold, purchase and HTTP request. From 100 µs
// to 10 s, 1-2.5-5 per decade. An uncontended acquisition on a local Redis
// takes a few hundred µs, a batch's critical section (claim the fence,
// read, one commit) a few ms, and a wait in a flash sale's queue runs up to
// LOCK_WAIT (2 s by default) or the lock package's 5 s default; 10 s is
// the default lease, the longest a stalled holder keeps the lock. Finer
// buckets would cost series for a precision the percentiles do not need.
var DurationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// BatchBuckets are the upper bounds of the batch size histogram: powers of
// two up to 1024, past BATCH_MAX's default of 64 and its limit of 1000.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// httpMethods are the methods counted by name; any other is "other", so
// that a client inventing methods cannot grow the label set.
var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// Metrics holds one replica's metrics and their registry. Use New. It is
// safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	purchases       *prometheus.CounterVec   // by outcome
	purchaseSeconds *prometheus.HistogramVec // by outcome
	fenceRejections *prometheus.CounterVec   // by stage
	batchSize       prometheus.Histogram
	ordersClosed    *prometheus.CounterVec // by state

	acquisitions    *prometheus.CounterVec // by contended
	waitSeconds     prometheus.Histogram   // successful acquisitions only
	acquireFailures prometheus.Counter
	releases        prometheus.Counter
	locksHeld       prometheus.Gauge
	heldSeconds     prometheus.Histogram
	renewalFailures prometheus.Counter
	leasesLost      prometheus.Counter

	chaosPaused        prometheus.Gauge
	expiriesInProgress prometheus.Gauge

	counterBuilds  prometheus.Counter
	ordersPending  prometheus.Gauge
	unitsReturning prometheus.Gauge
	ordersWritten  prometheus.Counter
	ordersClaimed  prometheus.Counter

	keyClaims *prometheus.CounterVec // by result

	httpRequests *prometheus.CounterVec   // by method, route, status
	httpSeconds  *prometheus.HistogramVec // by method, route
}

// New returns metrics at zero in a registry of their own, with the Go
// runtime and process collectors. Every purchase outcome, fence stage and
// contention label is present from the start, so that a scrape shows zeros
// rather than nothing and rates are defined from the first sample.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	m.purchases = m.counterVec("seckill_purchases_total", "Purchases by outcome.", "outcome")
	m.purchaseSeconds = m.histogramVec("seckill_purchase_duration_seconds",
		"Time to answer a purchase, queue and lock wait included, by outcome.", DurationBuckets, "outcome")
	m.fenceRejections = m.counterVec("seckill_fence_rejections_total",
		"Writes refused because a newer lock holder had claimed the product's fence (a stalled holder's late write), by stage.", "stage")
	m.batchSize = m.histogram("seckill_purchase_batch_size", "Purchases served per lock hold (group commit).", BatchBuckets)
	m.ordersClosed = m.counterVec("seckill_orders_closed_total",
		"Reservations (orders with a payment window) that left pending, by the state they went to: paid, cancelled, expired.", "state")

	m.acquisitions = m.counterVec("seckill_lock_acquisitions_total",
		"Lock acquisitions, by whether the first attempt found the lock taken.", "contended")
	m.waitSeconds = m.histogram("seckill_lock_wait_seconds", "Time spent waiting for locks that were acquired.", DurationBuckets)
	m.acquireFailures = m.counter("seckill_lock_acquire_failures_total", "Lock waits that ended without the lock.")
	m.releases = m.counter("seckill_lock_releases_total", "Lock releases.")
	m.locksHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_locks_held",
		Help: "Locks this replica holds now: acquired and not yet released (a holder stalled in its critical section shows here)."})
	m.reg.MustRegister(m.locksHeld)
	m.heldSeconds = m.histogram("seckill_lock_held_seconds", "Time locks were held.", DurationBuckets)
	m.renewalFailures = m.counter("seckill_lock_renewal_failures_total", "Background lease renewals that failed.")
	m.leasesLost = m.counter("seckill_lock_leases_lost_total", "Leases lost while held.")

	m.chaosPaused = prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_chaos_paused",
		Help: "Lock holders pausing now inside their critical section (CHAOS_PAUSE, for demonstrations; always 0 without it)."})
	m.reg.MustRegister(m.chaosPaused)
	m.expiriesInProgress = prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_expiries_in_progress",
		Help: "Products whose due orders this replica is expiring now (lock design): their locks held, their write not yet returned. A replica killed or stalled mid-expiry leaves these locks to their lease, and its late write to the fence."})
	m.reg.MustRegister(m.expiriesInProgress)

	m.counterBuilds = m.counter("seckill_counter_builds_total",
		"Stock counters this replica built from the database because Redis had none (counter designs).")
	m.ordersPending = prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_orders_pending",
		Help: "Items this replica has taken in Redis whose orders it has not yet written (counter designs): what would be lost with it."})
	m.reg.MustRegister(m.ordersPending)
	m.unitsReturning = prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_units_returning",
		Help: "Units of cancelled or expired orders that the database has taken back and this replica has not yet given back to the Redis counter (redis-counter): what would be lost with it."})
	m.reg.MustRegister(m.unitsReturning)
	m.ordersWritten = m.counter("seckill_orders_written_total", "Queued orders this replica's writer inserted (redis-counter-async).")
	m.ordersClaimed = m.counter("seckill_orders_claimed_total",
		"Queued orders this replica's writer took over from a writer that had not written them (redis-counter-async).")

	m.keyClaims = m.counterVec("seckill_idempotency_claims_total",
		"Requests with an Idempotency-Key, by what the claim of the key found: claimed (new), taken_over (from an attempt lost in flight), replay (answered again), in_flight (409 request_in_progress), reused (422 idempotency_key_reused).",
		"result")

	m.httpRequests = m.counterVec("seckill_http_requests_total",
		`HTTP requests by method, route (the route's pattern, such as /api/v1/products/:id/purchase; "unmatched" for unknown paths) and status.`,
		"method", "route", "status")
	m.httpSeconds = m.histogramVec("seckill_http_request_duration_seconds",
		"Time to answer an HTTP request, by method and route.", DurationBuckets, "method", "route")

	for _, o := range seckill.Outcomes {
		m.purchases.WithLabelValues(string(o))
		m.purchaseSeconds.WithLabelValues(string(o))
	}
	for _, st := range []seckill.OrderState{seckill.OrderPaid, seckill.OrderCancelled, seckill.OrderExpired} {
		m.ordersClosed.WithLabelValues(string(st))
	}
	for _, st := range seckill.KeyStates {
		m.keyClaims.WithLabelValues(st.String())
	}
	m.fenceRejections.WithLabelValues(string(seckill.FenceClaim))
	m.fenceRejections.WithLabelValues(string(seckill.FenceWrite))
	m.acquisitions.WithLabelValues("false")
	m.acquisitions.WithLabelValues("true")
	return m
}

// counter, counterVec, histogram and histogramVec make a metric and
// register it in m's registry.
func (m *Metrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	m.reg.MustRegister(h)
	return h
}

func (m *Metrics) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	m.reg.MustRegister(h)
	return h
}

// Handler serves the registry in the format the scraper asks for (the
// text format by default).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Gatherer is the registry, for tests and tools that read it directly.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// PurchaseDone counts a purchase (seckill.Recorder).
func (m *Metrics) PurchaseDone(outcome seckill.Outcome, took time.Duration) {
	m.purchases.WithLabelValues(string(outcome)).Inc()
	m.purchaseSeconds.WithLabelValues(string(outcome)).Observe(took.Seconds())
}

// FenceRejected counts a write the fence refused (seckill.Recorder).
func (m *Metrics) FenceRejected(stage seckill.FenceStage) {
	m.fenceRejections.WithLabelValues(string(stage)).Inc()
}

// BatchDone observes a batch's size (seckill.Recorder).
func (m *Metrics) BatchDone(size int) { m.batchSize.Observe(float64(size)) }

// OrdersClosed counts orders that left pending (seckill.Recorder).
func (m *Metrics) OrdersClosed(state seckill.OrderState, n int) {
	m.ordersClosed.WithLabelValues(string(state)).Add(float64(n))
}

// ExpiriesInProgress moves the gauge of products being expired now
// (seckill.Recorder).
func (m *Metrics) ExpiriesInProgress(n int) { m.expiriesInProgress.Add(float64(n)) }

// Acquired counts an acquisition and its wait (lock.Observer).
func (m *Metrics) Acquired(_ string, wait time.Duration, contended bool) {
	label := "false"
	if contended {
		label = "true"
	}
	m.acquisitions.WithLabelValues(label).Inc()
	m.locksHeld.Inc()
	m.waitSeconds.Observe(wait.Seconds())
}

// AcquireFailed counts a wait that ended without the lock (lock.Observer).
func (m *Metrics) AcquireFailed(string, time.Duration, error) { m.acquireFailures.Inc() }

// Released counts a release and how long the lock was held (lock.Observer).
func (m *Metrics) Released(_ string, held time.Duration) {
	m.releases.Inc()
	m.locksHeld.Dec()
	m.heldSeconds.Observe(held.Seconds())
}

// RenewalFailed counts a failed background renewal (lock.Observer).
func (m *Metrics) RenewalFailed(string, error) { m.renewalFailures.Inc() }

// LeaseLost counts a lease lost while held (lock.Observer).
func (m *Metrics) LeaseLost(string) { m.leasesLost.Inc() }

// ChaosPaused adds n to the holders pausing now in their critical section
// (CHAOS_PAUSE): +1 as a pause starts, -1 as it ends.
func (m *Metrics) ChaosPaused(n int) { m.chaosPaused.Add(float64(n)) }

// CounterBuilt counts a counter built from the database
// (seckill.CounterRecorder).
func (m *Metrics) CounterBuilt(int64) { m.counterBuilds.Inc() }

// OrdersPending moves the gauge of orders taken and not yet written
// (seckill.CounterRecorder).
func (m *Metrics) OrdersPending(n int) { m.ordersPending.Add(float64(n)) }

// UnitsReturning moves the gauge of units the database took back and the
// counter has not yet been given (seckill.CounterRecorder).
func (m *Metrics) UnitsReturning(n int) { m.unitsReturning.Add(float64(n)) }

// OrdersWritten counts orders a writer inserted (seckill.CounterRecorder).
func (m *Metrics) OrdersWritten(n int) { m.ordersWritten.Add(float64(n)) }

// OrdersClaimed counts orders a writer took over (seckill.CounterRecorder).
func (m *Metrics) OrdersClaimed(n int) { m.ordersClaimed.Add(float64(n)) }

// KeyClaimed counts a claim of an idempotency key by what it found
// (handlers.IdempotencyObserver).
func (m *Metrics) KeyClaimed(state seckill.KeyState) {
	m.keyClaims.WithLabelValues(state.String()).Inc()
}

// RequestDone counts an HTTP request (handlers.RequestObserver). route is
// the route's pattern, "" when no route matched: labelling by pattern, not
// by path, keeps one series per route however many products there are.
func (m *Metrics) RequestDone(method, route string, status int, took time.Duration) {
	if !httpMethods[method] {
		method = "other"
	}
	if route == "" {
		route = "unmatched"
	}
	m.httpRequests.WithLabelValues(method, route, statusText(status)).Inc()
	m.httpSeconds.WithLabelValues(method, route).Observe(took.Seconds())
}

// statusText is the status as a label: three digits for the codes
// net/http can send.
func statusText(code int) string {
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{byte('0' + code/100), byte('0' + code/10%10), byte('0' + code%10)})
}

// Purchases returns how many purchases ended with outcome.
func (m *Metrics) Purchases(outcome seckill.Outcome) int64 {
	return counterValue(m.purchases.WithLabelValues(string(outcome)))
}

// FenceRejections returns how many writes the fence refused, at any stage.
func (m *Metrics) FenceRejections() int64 {
	return counterValue(m.fenceRejections.WithLabelValues(string(seckill.FenceClaim))) +
		counterValue(m.fenceRejections.WithLabelValues(string(seckill.FenceWrite)))
}

// LeasesLost returns how many leases were lost while held.
func (m *Metrics) LeasesLost() int64 { return counterValue(m.leasesLost) }

// CounterBuilds returns how many counters this replica built.
func (m *Metrics) CounterBuilds() int64 { return counterValue(m.counterBuilds) }

// OrdersTakenOver returns how many queued orders this replica's writer
// took over.
func (m *Metrics) OrdersTakenOver() int64 { return counterValue(m.ordersClaimed) }

// OrdersPendingNow returns how many items this replica has taken and not
// yet written the orders of.
func (m *Metrics) OrdersPendingNow() int64 {
	var d dto.Metric
	if err := m.ordersPending.Write(&d); err != nil {
		return 0
	}
	return int64(d.GetGauge().GetValue())
}

// counterValue reads a counter. Counters here only ever count whole events.
func counterValue(c prometheus.Counter) int64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	return int64(d.GetCounter().GetValue())
}
