package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/loadtest"
)

// Scenario 13: a sale of several products at once; replica a pauses in
// every critical section, so that it holds the locks of several products
// at a time. SIGSTOP a while it is inside at least stallManyHeld critical
// sections, until its leases have run out (every lock key held when it
// stopped has expired or changed hands) and b has sold more, then SIGCONT.
// Woken, a carries on with each product, from stocks it read before b's
// sales: the fence must refuse each of those writes, and a's fence
// rejections must rise by at least two (two products), or the scenario
// tested one product, not several.
func TestSIGSTOPHolderOfSeveralProductsPastLeases(t *testing.T) {
	t.Parallel()
	stallSeveral(t, false)
}

// Negative control of scenario 13: the same stall with UNSAFE_NO_FENCE=true.
// The woken replica's writes go through and oversell.
func TestSIGSTOPHolderOfSeveralProductsControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	stallSeveral(t, true)
}

// Scenario 13's sale: stallManyProducts products, the buyers spread
// evenly over them at stallManyRate, so that a's pauses overlap on several
// at once; each product has stallManyStock items, as many as the sale may
// send requests: none sells out, however long the fault takes.
const (
	stallManyProducts = 12
	stallManyHeld     = 3
)

var (
	stallManyRate  = pick(80, 120)
	stallManyStock = plenty(stallManyRate)
)

func stallSeveral(t *testing.T, control bool) {
	const ttl = time.Second
	c := newCluster(t, 1, sqlite)
	env := map[string]string{"LOCK_TTL": ttl.String(), "LOCK_WAIT": "2s"}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	a := c.replica("a", with(env, "CHAOS_PAUSE", "300ms"))
	b := c.replica("b", env)
	cfg := saleConfig(0, stallManyRate, b, a)
	cfg.Products, cfg.Stock, cfg.Skew = stallManyProducts, stallManyStock, loadtest.Skew{Kind: loadtest.SkewUniform}
	var notes []string
	var before metrics
	fault := func(ctx context.Context) error {
		for attempt := 1; attempt <= maxFaultAttempts; attempt++ {
			var err error
			if before, err = waitPausedHolds(ctx, a, stallManyHeld); err != nil {
				return fmt.Errorf("attempt %d: %w; before it: %v", attempt, err, notes)
			}
			done, note, err := stallSeveralOnce(ctx, c, a, b, before, control)
			if note != "" {
				notes = append(notes, fmt.Sprintf("attempt %d: %s", attempt, note))
			}
			if err != nil || done {
				return err
			}
		}
		return fmt.Errorf("fault not injected: %d attempts, none caught %s in the critical sections of two products or more: %v", maxFaultAttempts, a.name, notes)
	}
	rep := c.sale(cfg, control, fault, &notes)

	ma := mustScrape(t, a)
	t.Logf("%s: fence rejections claim %v write %v (%v before the last stop), leases lost %v", a.name,
		ma[mFenceClaim], ma[mFenceWrite], before.fenceRejections(), ma[mLeasesLost])
	if len(rep.Products) != stallManyProducts {
		t.Fatalf("the sale sold %d products, want %d", len(rep.Products), stallManyProducts)
	}
	if ma[mLeasesLost] < 2 {
		t.Errorf("fault not injected: leases lost by the stopped replica: got %v, want 2 or more", ma[mLeasesLost])
	}
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if ma.fenceRejections()-before.fenceRejections() < 2 {
		t.Errorf("fault not injected: fence rejections of the stopped replica after its stop: got %v, want 2 or more",
			ma.fenceRejections()-before.fenceRejections())
	}
}

// mChaosPaused is the gauge of holders pausing in their critical section.
const mChaosPaused = `seckill_chaos_paused`

// waitPausedHolds polls until r has at least n holders paused in their
// critical sections (its chaos pause), each holding a product's lock, and
// returns r's metrics then.
func waitPausedHolds(ctx context.Context, r *replica, n float64) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var m metrics
	err := poll.Until(ctx, 2*time.Millisecond, func() (bool, error) {
		var err error
		if m, err = scrape(ctx, r); err != nil {
			return false, nil
		}
		return m[mChaosPaused] >= n && m.held() >= n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %s to pause in %v critical sections at once (last: %v paused, %v locks held): %w",
			r.name, n, m[mChaosPaused], m.held(), err)
	}
	return m, nil
}

// stallSeveralOnce stops a, caught holding several products' locks (the
// caller saw it, with metrics before), waits until every lock key held
// then has expired or changed hands (a, stopped, can neither renew nor
// release; b's holds end within milliseconds) and b has sold more since,
// and continues a. Then it waits for the evidence that a wrote from stale
// reads in two critical sections or more: its fence rejections rising by
// two or more or, in the control, a product oversold. done is false when
// the evidence does not come.
func stallSeveralOnce(ctx context.Context, c *cluster, a, b *replica, before metrics, control bool) (done bool, note string, err error) {
	if err := a.pause(); err != nil {
		return false, "", err
	}
	stoppedAt := time.Now()
	cont := a.resume
	products, err := b.api().Products(ctx)
	if err != nil {
		_ = cont()
		return false, "", fmt.Errorf("list the products through %s: %w", b.name, err)
	}
	owners := map[int64]string{}
	var soldAtStop int64
	for _, p := range products {
		soldAtStop += p.Sold
		owner, _, err := lockState(ctx, c.redis[0].Addr(), p.ID)
		if err != nil {
			_ = cont()
			return false, "", err
		}
		if owner != "" {
			owners[p.ID] = owner
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waitErr := poll.Until(wctx, 5*time.Millisecond, func() (bool, error) {
		for id, owner := range owners {
			if now, _, err := lockState(wctx, c.redis[0].Addr(), id); err != nil || now == owner {
				return false, nil
			}
		}
		return true, nil
	})
	expired := time.Since(stoppedAt)
	var blocked error
	if waitErr == nil {
		blocked = waitSoldAll(ctx, b, soldAtStop, stalledWriterWait)
	}
	stopped := time.Since(stoppedAt)
	if err := cont(); err != nil {
		return false, "", err
	}
	if waitErr != nil {
		return false, "", fmt.Errorf("%s stopped with %d locks taken: %w", a.name, len(owners), waitErr)
	}
	if blocked != nil {
		if ctx.Err() != nil {
			return false, "", ctx.Err()
		}
		return false, fmt.Sprintf("%s stopped for %v, its locks expired after %v, but %s sold nothing: %s",
			a.name, stopped.Round(time.Millisecond), expired.Round(time.Millisecond), b.name, stoppedInWrite), nil
	}
	note = fmt.Sprintf("%s stopped for %v with %v holders paused and %d product locks taken in Redis; those had all expired or changed hands after %v",
		a.name, stopped.Round(time.Millisecond), before[mChaosPaused], len(owners), expired.Round(time.Millisecond))

	ectx, cancelEvidence := context.WithTimeout(ctx, 10*time.Second)
	defer cancelEvidence()
	var evidence string
	err = poll.Until(ectx, 20*time.Millisecond, func() (bool, error) {
		if control {
			ps, err := b.api().Products(ectx)
			if err != nil {
				return false, nil
			}
			for _, p := range ps {
				if ok, what := oversoldNow(p, stallManyStock); ok {
					evidence = fmt.Sprintf("product %d %s", p.ID, what)
					return true, nil
				}
			}
			return false, nil
		}
		m, err := scrape(ectx, a)
		if err != nil || m.fenceRejections()-before.fenceRejections() < 2 {
			return false, nil
		}
		evidence = fmt.Sprintf("%s's fence rejections went from %v to %v", a.name, before.fenceRejections(), m.fenceRejections())
		return true, nil
	})
	if err != nil && ctx.Err() != nil {
		return false, "", ctx.Err()
	}
	if evidence == "" {
		return false, note + "; no evidence that it wrote from stale reads of two products", nil
	}
	return true, note + "; " + evidence, nil
}

// waitSoldAll polls until the products' sold counts, as r lists them, add
// up to more than n.
func waitSoldAll(ctx context.Context, r *replica, n int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return poll.Until(ctx, 5*time.Millisecond, func() (bool, error) {
		ps, err := r.api().Products(ctx)
		var sold int64
		for _, p := range ps {
			sold += p.Sold
		}
		return err == nil && sold > n, nil
	})
}
