package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// Scenario 6: restart the single Redis mid-sale from a snapshot taken
// earlier in the sale (SAVE, then more purchases, then the restart loads
// the snapshot: Redis's default RDB persistence after a crash). The fence
// counter comes back older than the tokens the store has accepted since.
// Tokens follow the server's clock, so the next holder's token is still
// larger than every earlier one: its claim succeeds and the sale goes on
// at once. With tokens counted from the counter alone, every purchase
// after the restart carries a token the store has already seen, and the
// fence refuses it with a 503, until as many acquisitions as the snapshot
// missed have gone by: nothing is oversold, but the sale stalls.
//
// The restart comes at least one lease after the SAVE, so that every lock
// and queue entry in the snapshot has expired: a lock that came back live
// would block the product for the rest of its lease, which is another
// effect of a stale snapshot, not the one measured here.
func TestRedisStaleSnapshotRestartMidSale(t *testing.T) {
	t.Parallel()
	staleSnapshot(t, false)
}

// Negative control of scenario 6: the same restart with
// UNSAFE_COUNTER_TOKENS=true (last token + 1) stalls: the fence refuses
// the purchases after the restart, at least staleSnapshotStall of them.
func TestRedisStaleSnapshotControlCounterTokensStall(t *testing.T) {
	t.Parallel()
	staleSnapshot(t, true)
}

const (
	// missedOrders is how many orders, and lock holds, the snapshot
	// misses at least: the holds between the SAVE and the restart took
	// tokens that the counter rule issues again.
	missedOrders = 20
	// staleSnapshotStall is the fence rejections after the restart that
	// make a stall: the control must reach it, the scenario stay at or
	// below the number of replicas (a purchase in its critical section
	// across the restart may be refused once, as in scenario 3).
	staleSnapshotStall = 10
)

func staleSnapshot(t *testing.T, control bool) {
	const ttl = time.Second
	c := newCluster(t, 1, sqlite)
	env := map[string]string{"LOCK_TTL": ttl.String(), "LOCK_WAIT": "2s"}
	if control {
		env = with(env, "UNSAFE_COUNTER_TOKENS", "true")
	}
	a := c.replica("a", env)
	b := c.replica("b", env)
	replicas := []*replica{a, b}

	rate := pick(60, 100)
	id := createProduct(t, b, int(plenty(rate)))
	srv := c.redis[0]
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer admin.Close()
	fence := lockKey(id) + ":fence"

	var note string
	var soldAtRestart int64
	var before metrics
	fault := func(ctx context.Context) error {
		if err := waitSold(ctx, b, id, 2, 30*time.Second); err != nil {
			return err
		}
		if err := admin.Save(ctx).Err(); err != nil {
			return fmt.Errorf("SAVE: %w", err)
		}
		savedAt := time.Now()
		atSave, err := admin.Get(ctx, fence).Int64()
		if err != nil {
			return fmt.Errorf("read the fence counter after SAVE: %w", err)
		}
		soldAtSave, _ := sold(ctx, b, id)
		// Read after the SAVE: the lock holds since then are at least
		// those counted from here.
		atSaveMetrics, err := sumMetrics(ctx, replicas)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = poll.Until(wctx, 5*time.Millisecond, func() (bool, error) {
			s, ok := sold(wctx, b, id)
			if !ok || s < soldAtSave+missedOrders || time.Since(savedAt) <= ttl {
				return false, nil
			}
			m, err := sumMetrics(wctx, replicas)
			return err == nil && m.acquisitions()-atSaveMetrics.acquisitions() >= missedOrders, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for %d orders and lock holds, and a lease, after the SAVE: %w", missedOrders, err)
		}
		atRestart, err := admin.Get(ctx, fence).Int64()
		if err != nil {
			return fmt.Errorf("read the fence counter before the restart: %w", err)
		}
		if before, err = sumMetrics(ctx, replicas); err != nil {
			return err
		}
		soldAtRestart, _ = sold(ctx, b, id)
		if err := srv.Server.Restart(ctx); err != nil {
			return fmt.Errorf("restart redis-server: %w", err)
		}
		restarted := time.Now()
		if atSave >= atRestart {
			return fmt.Errorf("fault not injected: the snapshot's fence counter (at most %d) is not older than the last token issued before the restart (%d)", atSave, atRestart)
		}
		// The sale after the restart, until it shows what it must: in the
		// control, the stall (staleSnapshotStall claims refused); otherwise
		// enough lock holds to tell a sale that resumes at once from one
		// that stalls (as many as the control's stall, and one per replica
		// more), and five more orders. Orders alone would not do: a batch
		// that claimed before the restart may write its orders after it.
		actx, cancelAfter := context.WithTimeout(ctx, 30*time.Second)
		defer cancelAfter()
		var since metrics
		err = poll.Until(actx, 5*time.Millisecond, func() (bool, error) {
			m, err := sumMetrics(actx, replicas)
			if err != nil {
				return false, nil
			}
			since = m
			if control {
				return m[mFenceClaim]-before[mFenceClaim] >= staleSnapshotStall, nil
			}
			s, ok := sold(actx, b, id)
			return ok && s >= soldAtRestart+5 && m.acquisitions()-before.acquisitions() >= staleSnapshotStall+float64(len(replicas)), nil
		})
		if err != nil {
			return fmt.Errorf("after the restart (%v lock holds, %v claims refused since): %w",
				since.acquisitions()-before.acquisitions(), since[mFenceClaim]-before[mFenceClaim], err)
		}
		note = fmt.Sprintf("SAVE with %d sold and the counter at %d; restart %v later with %d sold and the counter at %d; %v lock holds and %v claims refused in the %v after the restart",
			soldAtSave, atSave, restarted.Sub(savedAt).Round(time.Millisecond), soldAtRestart, atRestart,
			since.acquisitions()-before.acquisitions(), since[mFenceClaim]-before[mFenceClaim], time.Since(restarted).Round(time.Millisecond))
		return nil
	}
	cfg := saleConfig(id, rate, b, a)
	rep := c.sale(cfg, false, fault, nil)
	t.Log(note)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	after, err := sumMetrics(ctx, replicas)
	if err != nil {
		t.Fatal(err)
	}
	claims := after[mFenceClaim] - before[mFenceClaim]
	rejections := after.fenceRejections() - before.fenceRejections()
	t.Logf("after the restart: %v fence rejections (%v at the claim), %v lock waits given up; %d sold at the restart, %d at the end; the whole sale had %d answers 503 busy",
		rejections, claims, after[mBusy]-before[mBusy], soldAtRestart, rep.After.Sold, rep.ByOutcome["503 busy"])
	assertSafe(t, rep)
	if control {
		if claims < staleSnapshotStall {
			t.Errorf("control: fault not injected: fence rejections at the claim after the restart: got %v, want at least %d: the tokens did not go back, and the scenario would not catch it", claims, staleSnapshotStall)
		}
		return
	}
	orders, err := b.api().Orders(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	assertFencesIncrease(t, orders)
	if rejections > float64(len(replicas)) {
		t.Errorf("fence rejections after the restart: got %v, want at most %d (one purchase per replica caught across it): the sale stalled", rejections, len(replicas))
	}
	if rep.After.Sold <= soldAtRestart {
		t.Errorf("orders after the sale: got %d, want more than the %d there were at the restart", rep.After.Sold, soldAtRestart)
	}
}

// sumMetrics adds up the replicas' metrics.
func sumMetrics(ctx context.Context, replicas []*replica) (metrics, error) {
	sum := metrics{}
	for _, r := range replicas {
		m, err := scrape(ctx, r)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum, nil
}
