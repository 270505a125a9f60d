package metrics_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/metrics"
	"github.com/seckill-ref/seckill/internal/seckill"
)

func TestWritePrometheus(t *testing.T) {
	m := metrics.New()
	m.PurchaseDone(seckill.OutcomeCreated, 2*time.Millisecond)
	m.PurchaseDone(seckill.OutcomeFenceRejected, time.Millisecond)
	m.FenceRejected(seckill.FenceWrite)
	m.FenceRejected(seckill.FenceClaim)
	m.Acquired("product:1", 500*time.Millisecond, true)
	m.AcquireFailed("product:1", time.Second, errors.New("timeout"))
	m.Released("product:1", time.Second)
	m.RenewalFailed("product:1", errors.New("x"))
	m.LeaseLost("product:1")

	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		`seckill_purchases_total{outcome="created"} 1`,
		`seckill_purchases_total{outcome="fence_rejected"} 1`,
		`seckill_purchases_total{outcome="busy"} 0`,
		`seckill_fence_rejections_total{stage="claim"} 1`,
		`seckill_fence_rejections_total{stage="write"} 1`,
		`seckill_lock_acquisitions_total{contended="true"} 1`,
		`seckill_lock_wait_seconds_sum 0.5`,
		`seckill_lock_wait_seconds_count 1`,
		`seckill_lock_acquire_failures_total 1`,
		`seckill_lock_renewal_failures_total 1`,
		`seckill_lock_leases_lost_total 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	// Every sample line belongs to a metric declared just before it.
	sample := regexp.MustCompile(`^([a-z_]+?)(_sum|_count)?(\{[a-z_]+="[a-z_]+"\})? [0-9.e+-]+$`)
	declared := ""
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			declared = strings.Fields(name)[0]
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(line, declared) {
			t.Errorf("line %q: not a sample of %s", line, declared)
		}
	}
	if m.FenceRejections() != 2 || m.LeasesLost() != 1 || m.Purchases(seckill.OutcomeCreated) != 1 {
		t.Error("accessors disagree with the counts")
	}
}
