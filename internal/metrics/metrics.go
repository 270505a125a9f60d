// Package metrics counts what the service and its lock do and writes the
// counts in the Prometheus text format (version 0.0.4). It is written by
// hand: a dozen counters do not justify a client library, and the format is
// a few lines of text.
//
// Metrics implements lock.Observer, to count acquisitions, waits, renewal
// failures and lost leases, and seckill.Recorder, to count purchases by
// outcome and the writes the fence refused. The domain does not import this
// package; internal/app hands a *Metrics to both.
package metrics

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
)

var (
	_ lock.Observer    = (*Metrics)(nil)
	_ seckill.Recorder = (*Metrics)(nil)
)

// ContentType is the media type of WritePrometheus's output.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Metrics holds the process's counters. The zero value is not ready; use
// New. It is safe for concurrent use.
type Metrics struct {
	purchases       *counterVec // by outcome
	purchaseSeconds *summary
	fenceRejections *counterVec // by stage
	batches         atomic.Int64
	batchedCalls    atomic.Int64

	acquisitions    *counterVec // by contended
	waitSeconds     *summary    // successful acquisitions only
	acquireFailures atomic.Int64
	releases        atomic.Int64
	heldSeconds     *summary
	renewalFailures atomic.Int64
	leasesLost      atomic.Int64
}

// New returns counters at zero. Every label value that can occur is
// present from the start, so that a scrape shows zeros rather than nothing
// and rates are defined from the first sample.
func New() *Metrics {
	outcomes := make([]string, len(seckill.Outcomes))
	for i, o := range seckill.Outcomes {
		outcomes[i] = string(o)
	}
	return &Metrics{
		purchases:       newCounterVec("outcome", outcomes...),
		purchaseSeconds: &summary{},
		fenceRejections: newCounterVec("stage", string(seckill.FenceClaim), string(seckill.FenceWrite)),
		acquisitions:    newCounterVec("contended", "false", "true"),
		waitSeconds:     &summary{},
		heldSeconds:     &summary{},
	}
}

// PurchaseDone counts a purchase (seckill.Recorder).
func (m *Metrics) PurchaseDone(outcome seckill.Outcome, took time.Duration) {
	m.purchases.inc(string(outcome))
	m.purchaseSeconds.observe(took)
}

// FenceRejected counts a write the fence refused (seckill.Recorder).
func (m *Metrics) FenceRejected(stage seckill.FenceStage) { m.fenceRejections.inc(string(stage)) }

// BatchDone counts a batch and the purchases in it (seckill.Recorder).
func (m *Metrics) BatchDone(size int) {
	m.batches.Add(1)
	m.batchedCalls.Add(int64(size))
}

// Acquired counts an acquisition and its wait (lock.Observer).
func (m *Metrics) Acquired(_ string, wait time.Duration, contended bool) {
	m.acquisitions.inc(fmt.Sprint(contended))
	m.waitSeconds.observe(wait)
}

// AcquireFailed counts a wait that ended without the lock (lock.Observer).
func (m *Metrics) AcquireFailed(string, time.Duration, error) { m.acquireFailures.Add(1) }

// Released counts a release and how long the lock was held (lock.Observer).
func (m *Metrics) Released(_ string, held time.Duration) {
	m.releases.Add(1)
	m.heldSeconds.observe(held)
}

// RenewalFailed counts a failed background renewal (lock.Observer).
func (m *Metrics) RenewalFailed(string, error) { m.renewalFailures.Add(1) }

// LeaseLost counts a lease lost while held (lock.Observer).
func (m *Metrics) LeaseLost(string) { m.leasesLost.Add(1) }

// Purchases returns how many purchases ended with outcome.
func (m *Metrics) Purchases(outcome seckill.Outcome) int64 { return m.purchases.get(string(outcome)) }

// FenceRejections returns how many writes the fence refused, at any stage.
func (m *Metrics) FenceRejections() int64 {
	return m.fenceRejections.get(string(seckill.FenceClaim)) + m.fenceRejections.get(string(seckill.FenceWrite))
}

// LeasesLost returns how many leases were lost while held.
func (m *Metrics) LeasesLost() int64 { return m.leasesLost.Load() }

// WritePrometheus writes every metric in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	var b strings.Builder
	m.purchases.write(&b, "seckill_purchases_total", "Purchases by outcome.")
	m.purchaseSeconds.write(&b, "seckill_purchase_duration_seconds", "Time to answer a purchase.")
	m.fenceRejections.write(&b, "seckill_fence_rejections_total",
		"Writes refused because a newer lock holder had claimed the product's fence (a stalled holder's late write).")
	fmt.Fprintf(&b, "# HELP %[1]s Purchases served in batches under one lock hold, per batch.\n# TYPE %[1]s summary\n%[1]s_sum %d\n%[1]s_count %d\n",
		"seckill_purchase_batch_size", m.batchedCalls.Load(), m.batches.Load())
	m.acquisitions.write(&b, "seckill_lock_acquisitions_total", "Lock acquisitions, by whether the first attempt found the lock taken.")
	m.waitSeconds.write(&b, "seckill_lock_wait_seconds", "Time spent waiting for locks that were acquired.")
	counter(&b, "seckill_lock_acquire_failures_total", "Lock waits that ended without the lock.", m.acquireFailures.Load())
	counter(&b, "seckill_lock_releases_total", "Lock releases.", m.releases.Load())
	m.heldSeconds.write(&b, "seckill_lock_held_seconds", "Time locks were held.")
	counter(&b, "seckill_lock_renewal_failures_total", "Background lease renewals that failed.", m.renewalFailures.Load())
	counter(&b, "seckill_lock_leases_lost_total", "Leases lost while held.", m.leasesLost.Load())
	_, err := io.WriteString(w, b.String())
	return err
}

func counter(b *strings.Builder, name, help string, v int64) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
}

// counterVec is a counter with one label whose values are known up front.
type counterVec struct {
	label  string
	values map[string]*atomic.Int64 // never written after newCounterVec
}

func newCounterVec(label string, values ...string) *counterVec {
	v := &counterVec{label: label, values: make(map[string]*atomic.Int64, len(values))}
	for _, s := range values {
		v.values[s] = new(atomic.Int64)
	}
	return v
}

// inc ignores values it was not told about rather than growing the map
// under concurrent readers.
func (v *counterVec) inc(value string) {
	if c, ok := v.values[value]; ok {
		c.Add(1)
	}
}

func (v *counterVec) get(value string) int64 {
	if c, ok := v.values[value]; ok {
		return c.Load()
	}
	return 0
}

func (v *counterVec) write(b *strings.Builder, name, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	keys := make([]string, 0, len(v.values))
	for k := range v.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s{%s=%q} %d\n", name, v.label, k, v.values[k].Load())
	}
}

// summary is a Prometheus summary without quantiles: a sum and a count,
// enough for average rates.
type summary struct {
	mu    sync.Mutex
	sum   time.Duration
	count int64
}

func (s *summary) observe(d time.Duration) {
	s.mu.Lock()
	s.sum += d
	s.count++
	s.mu.Unlock()
}

func (s *summary) write(b *strings.Builder, name, help string) {
	s.mu.Lock()
	sum, count := s.sum, s.count
	s.mu.Unlock()
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s summary\n%s_sum %g\n%s_count %d\n",
		name, help, name, name, sum.Seconds(), name, count)
}
