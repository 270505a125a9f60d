package metrics_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/metrics"
	"github.com/seckill-ref/seckill/internal/seckill"
)

// scrape GETs m's handler as Prometheus would, without asking for a
// particular format, and parses the text it gets.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: got %d, want 200", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type: got %q, want the text format 0.0.4", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// family returns the family called name, of type typ.
func family(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) *dto.MetricFamily {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	if f.GetType() != typ {
		t.Fatalf("%s: got type %v, want %v", name, f.GetType(), typ)
	}
	return f
}

// sample returns the metric of f whose labels are exactly labels (pairs).
func sample(t *testing.T, f *dto.MetricFamily, labels ...string) *dto.Metric {
	t.Helper()
	for _, m := range f.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for i, l := range m.GetLabel() {
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				match = false
			}
		}
		if match {
			return m
		}
	}
	t.Fatalf("%s has no sample with labels %v", f.GetName(), labels)
	return nil
}

// bucketCount is the cumulative count of h's bucket with upper bound le.
func bucketCount(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%g", le)
	return 0
}

func TestMetricsPage(t *testing.T) {
	m := metrics.New()
	m.PurchaseDone(seckill.OutcomeCreated, 2*time.Millisecond)
	m.PurchaseDone(seckill.OutcomeCreated, 30*time.Millisecond)
	m.PurchaseDone(seckill.OutcomeFenceRejected, time.Millisecond)
	m.FenceRejected(seckill.FenceWrite)
	m.FenceRejected(seckill.FenceClaim)
	m.BatchDone(3)
	m.BatchDone(64)
	m.Acquired("product:1", 500*time.Millisecond, true)
	m.Acquired("product:1", 200*time.Microsecond, false)
	m.AcquireFailed("product:1", time.Second, errors.New("timeout"))
	m.Released("product:1", 4*time.Millisecond)
	m.RenewalFailed("product:1", errors.New("x"))
	m.LeaseLost("product:1")
	m.RequestDone("POST", "/api/v1/products/:id/purchase", 201, 3*time.Millisecond)
	m.RequestDone("POST", "/api/v1/products/:id/purchase", 409, time.Millisecond)
	m.RequestDone("BREW", "", 404, time.Millisecond)
	m.KeyClaimed(seckill.KeyReplay)
	m.KeyClaimed(seckill.KeyReplay)
	m.KeyClaimed(seckill.KeyInFlight)
	m.ExpiriesInProgress(3) // a round of three products
	m.ExpiriesInProgress(2) // another of two
	m.ExpiriesInProgress(-3)

	fams := scrape(t, m)

	counters := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"seckill_purchases_total", []string{"outcome", "created"}, 2},
		{"seckill_purchases_total", []string{"outcome", "fence_rejected"}, 1},
		{"seckill_purchases_total", []string{"outcome", "busy"}, 0}, // present at zero
		{"seckill_fence_rejections_total", []string{"stage", "claim"}, 1},
		{"seckill_fence_rejections_total", []string{"stage", "write"}, 1},
		{"seckill_lock_acquisitions_total", []string{"contended", "true"}, 1},
		{"seckill_lock_acquisitions_total", []string{"contended", "false"}, 1},
		{"seckill_lock_acquire_failures_total", nil, 1},
		{"seckill_lock_releases_total", nil, 1},
		{"seckill_lock_renewal_failures_total", nil, 1},
		{"seckill_lock_leases_lost_total", nil, 1},
		{"seckill_http_requests_total", []string{"method", "POST", "route", "/api/v1/products/:id/purchase", "status", "201"}, 1},
		{"seckill_http_requests_total", []string{"method", "POST", "route", "/api/v1/products/:id/purchase", "status", "409"}, 1},
		{"seckill_http_requests_total", []string{"method", "other", "route", "unmatched", "status", "404"}, 1},
		{"seckill_idempotency_claims_total", []string{"result", "replay"}, 2},
		{"seckill_idempotency_claims_total", []string{"result", "in_flight"}, 1},
		{"seckill_idempotency_claims_total", []string{"result", "reused"}, 0}, // present at zero
	}
	for _, c := range counters {
		f := family(t, fams, c.name, dto.MetricType_COUNTER)
		if got := sample(t, f, c.labels...).GetCounter().GetValue(); got != c.want {
			t.Errorf("%s%v: got %g, want %g", c.name, c.labels, got, c.want)
		}
	}

	// Two acquired, one released: one held.
	if got := sample(t, family(t, fams, "seckill_locks_held", dto.MetricType_GAUGE)).GetGauge().GetValue(); got != 1 {
		t.Errorf("seckill_locks_held: got %g, want 1", got)
	}
	// Two rounds began, one ended: its two products are still being expired.
	if got := sample(t, family(t, fams, "seckill_expiries_in_progress", dto.MetricType_GAUGE)).GetGauge().GetValue(); got != 2 {
		t.Errorf("seckill_expiries_in_progress: got %g, want 2", got)
	}

	// The lock wait: one 200 µs wait, one 500 ms wait.
	wait := sample(t, family(t, fams, "seckill_lock_wait_seconds", dto.MetricType_HISTOGRAM)).GetHistogram()
	if wait.GetSampleCount() != 2 || wait.GetSampleSum() != 0.5002 {
		t.Errorf("lock wait: got count %d sum %g, want 2 and 0.5002", wait.GetSampleCount(), wait.GetSampleSum())
	}
	for _, b := range []struct {
		le   float64
		want uint64
	}{{0.0001, 0}, {0.00025, 1}, {0.25, 1}, {0.5, 2}, {10, 2}} {
		if got := bucketCount(t, wait, b.le); got != b.want {
			t.Errorf("lock wait bucket le=%g: got %d, want %d", b.le, got, b.want)
		}
	}
	if n := len(wait.GetBucket()); n != len(metrics.DurationBuckets)+1 { // and +Inf
		t.Errorf("lock wait: got %d buckets, want %d", n, len(metrics.DurationBuckets)+1)
	}
	held := sample(t, family(t, fams, "seckill_lock_held_seconds", dto.MetricType_HISTOGRAM)).GetHistogram()
	if got := bucketCount(t, held, 0.0025); got != 0 || bucketCount(t, held, 0.005) != 1 {
		t.Errorf("lock held: a 4 ms hold is not in the 5 ms bucket alone (le=0.0025: %d)", got)
	}
	purchase := family(t, fams, "seckill_purchase_duration_seconds", dto.MetricType_HISTOGRAM)
	created := sample(t, purchase, "outcome", "created").GetHistogram()
	if created.GetSampleCount() != 2 || bucketCount(t, created, 0.0025) != 1 || bucketCount(t, created, 0.05) != 2 {
		t.Errorf("purchase duration of created: got %v", created)
	}
	batch := sample(t, family(t, fams, "seckill_purchase_batch_size", dto.MetricType_HISTOGRAM)).GetHistogram()
	if batch.GetSampleSum() != 67 || bucketCount(t, batch, 4) != 1 || bucketCount(t, batch, 64) != 2 {
		t.Errorf("batch size: got %v", batch)
	}
	httpSeconds := family(t, fams, "seckill_http_request_duration_seconds", dto.MetricType_HISTOGRAM)
	if n := sample(t, httpSeconds, "method", "POST", "route", "/api/v1/products/:id/purchase").GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("HTTP duration of purchases: got %d samples, want 2", n)
	}

	// The runtime and process collectors.
	if g := sample(t, family(t, fams, "go_goroutines", dto.MetricType_GAUGE)).GetGauge().GetValue(); g < 1 {
		t.Errorf("go_goroutines: got %g", g)
	}
	family(t, fams, "process_resident_memory_bytes", dto.MetricType_GAUGE)

	if m.FenceRejections() != 2 || m.LeasesLost() != 1 || m.Purchases(seckill.OutcomeCreated) != 2 {
		t.Error("accessors disagree with the counts")
	}
}

// Two Metrics in one process count apart: each replica has its own
// registry, none is the library's global one.
func TestMetricsPerReplica(t *testing.T) {
	a, b := metrics.New(), metrics.New()
	a.PurchaseDone(seckill.OutcomeCreated, time.Millisecond)
	a.LeaseLost("x")
	if got := b.Purchases(seckill.OutcomeCreated); got != 0 {
		t.Errorf("b counted a's purchase: got %d, want 0", got)
	}
	f := family(t, scrape(t, b), "seckill_lock_leases_lost_total", dto.MetricType_COUNTER)
	if got := sample(t, f).GetCounter().GetValue(); got != 0 {
		t.Errorf("b's page shows a's lost lease: got %g, want 0", got)
	}
	if got := a.Purchases(seckill.OutcomeCreated); got != 1 {
		t.Errorf("a: got %d purchases, want 1", got)
	}
}

// The dashboard keeps lock waits in the same buckets as the histogram, so
// that its percentiles and Prometheus's agree; it does not import this
// package, which alone knows the Prometheus library.
func TestDashboardUsesTheHistogramBuckets(t *testing.T) {
	if !slices.Equal(dashboard.WaitBuckets, metrics.DurationBuckets) {
		t.Errorf("dashboard.WaitBuckets %v, metrics.DurationBuckets %v: want the same", dashboard.WaitBuckets, metrics.DurationBuckets)
	}
}
