package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// Scenario 5: every critical section lasts longer than the lease (a chaos
// pause of 1.5 s with a 1 s TTL), with auto-renewal on. The watchdog
// extends the lease every TTL/3, so no lease is lost, no other replica
// gets in, and no purchase is refused by the fence; the few items sell
// one after another. No fault is injected from outside: the slowness is
// the fault.
func TestSlowCriticalSectionRenewed(t *testing.T) {
	t.Parallel()
	slowCriticalSection(t, false)
}

// Negative control of scenario 5: the same pause with LOCK_RENEW=false.
// Every lease runs out in the middle of the pause (certain: the pause is
// 1.5 x the TTL), the other replica takes the lock over, and the first
// holder's write is refused by the fence. Lost leases and fence rejections
// are > 0; the fence still keeps the sale exact.
func TestSlowCriticalSectionControlNoRenewalLosesLeases(t *testing.T) {
	t.Parallel()
	slowCriticalSection(t, true)
}

func slowCriticalSection(t *testing.T, control bool) {
	c := newCluster(t, 1, sqlite)
	env := map[string]string{
		"LOCK_TTL":    "1s",
		"CHAOS_PAUSE": "1500ms",
		"CHAOS_PROB":  "1",
		// Buyers queue behind 1.5 s critical sections; a wait of a few
		// of them keeps most answers on the merits rather than busy.
		"LOCK_WAIT": "5s",
	}
	if control {
		env = with(env, "LOCK_RENEW", "false")
	}
	a := c.replica("a", env)
	b := c.replica("b", env)
	stock := pick(3, 8)
	id := createProduct(t, a, stock)

	// Nothing to inject: the sale lasts until what it must show has
	// happened. With renewal, two slow critical sections have sold (each
	// outlived its lease, renewed); without it, a lease was lost and the
	// fence refused a late write.
	until := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var seen metrics
		err := poll.Until(ctx, 20*time.Millisecond, func() (bool, error) {
			m, err := sumMetrics(ctx, []*replica{a, b})
			if err != nil {
				return false, nil
			}
			seen = m
			if control {
				return m[mLeasesLost] > 0 && m.fenceRejections() > 0, nil
			}
			s, ok := sold(ctx, a, id)
			return ok && s >= 2, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for the slow critical sections (control %v; so far: %v leases lost, %v fence rejections): %w",
				control, seen[mLeasesLost], seen.fenceRejections(), err)
		}
		return nil
	}
	cfg := saleConfig(id, 10, a, b)
	rep := runSale(t, cfg, until)

	var lost, rejected, renewalFailures, acquisitions float64
	for _, r := range []*replica{a, b} {
		m := mustScrape(t, r)
		t.Logf("%s: acquisitions %v, leases lost %v, renewal failures %v, fence rejections claim %v write %v",
			r.name, m[mAcqUncontended]+m[mAcqContended], m[mLeasesLost], m[mRenewalFailures], m[mFenceClaim], m[mFenceWrite])
		lost += m[mLeasesLost]
		rejected += m.fenceRejections()
		renewalFailures += m[mRenewalFailures]
		acquisitions += m[mAcqUncontended] + m[mAcqContended]
	}
	// Both modes must keep the sale exact: the fence does, renewal or not.
	assertSafe(t, rep)
	if acquisitions < 2 {
		t.Fatalf("fault not injected: lock acquisitions: got %v, want at least 2 slow critical sections", acquisitions)
	}
	if control {
		if lost == 0 || rejected == 0 {
			t.Errorf("without renewal: got %v leases lost and %v fence rejections, want both > 0 (fault not injected)", lost, rejected)
		}
		return
	}
	if lost != 0 {
		t.Errorf("leases lost with renewal on: got %v, want 0", lost)
	}
	if rejected != 0 {
		t.Errorf("purchases refused by the fence with renewal on: got %v, want 0", rejected)
	}
	if rep.Created < 2 {
		t.Errorf("purchases: got %d, want at least 2 critical sections longer than the lease to complete", rep.Created)
	}
	t.Logf("renewal failures (retried, not lost): %v", renewalFailures)
}
