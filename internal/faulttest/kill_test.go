package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Scenario 1: kill -9 a replica while it holds the product's lock, in the
// middle of the sale. Its lease is not released and not renewed; it runs
// out within LOCK_TTL and the survivors take the lock over, so the product
// is not blocked and the sale completes. The killed replica stays a load
// test target: requests to it fail to connect, and the checker counts them
// as unknown outcomes, which invariant (4) allows for.
func TestKill9ReplicaHoldingLock(t *testing.T) {
	killReplica(t, sqlite, false)
}

// Scenario 1 on PostgreSQL: the killed holder's connections die with it,
// and their transactions with them; the survivors sell the rest.
func TestKill9ReplicaHoldingLockPostgres(t *testing.T) {
	killReplica(t, postgres, false)
}

// Negative control of scenario 1: the same sale and kill with the local
// lock mode (a mutex per process, no fence) must oversell. A chaos pause
// inside every critical section makes the replicas' critical sections
// overlap for certain, so the lost update does not depend on luck.
func TestKill9ReplicaControlLocalLockOversells(t *testing.T) {
	killReplica(t, sqlite, true)
}

func killReplica(t *testing.T, db database, control bool) {
	const ttl = time.Second
	c := newCluster(t, 1, db)
	env := map[string]string{
		"LOCK_TTL": ttl.String(),
		// Longer than a lease: a buyer queued behind the dead holder is
		// served after the takeover, not told "busy".
		"LOCK_WAIT": "3s",
		// One purchase per lock hold: the survivors' batches could
		// otherwise sell out what is left in the moment of the kill,
		// leaving no sale after the takeover to show it.
		"BATCH_MAX": "1",
	}
	// Only the victim pauses, so that when it holds the lock it holds it
	// long enough to be killed holding it; the survivors sell at full
	// speed once it is gone.
	victimEnv := with(env, "CHAOS_PAUSE", "300ms")
	if control {
		env = with(env, "LOCK", "local", "CHAOS_PAUSE", "100ms")
		victimEnv = env
	}
	a := c.replica("a", victimEnv)
	b := c.replica("b", env)
	cc := c.replica("c", env)

	stock := stockFor(db, 40, 80, 300)
	id := createProduct(t, b, stock)
	minSold := int64(5)

	var killedAt time.Time
	var soldAtKill int64
	var takeover time.Duration
	var leaseOwner string
	var leaseLeft time.Duration
	fault := func(ctx context.Context) error {
		if _, err := waitHolding(ctx, a, b, id, minSold, 30*time.Second); err != nil {
			return err
		}
		if err := a.kill(); err != nil {
			return err
		}
		killedAt = time.Now()
		if !control {
			// Evidence for the log: the dead replica's lease, still in
			// Redis, runs out on its own.
			var err error
			if leaseOwner, leaseLeft, err = lockState(ctx, c.redis[0].Addr(), id); err != nil {
				return fmt.Errorf("read the lock after the kill: %w", err)
			}
		}
		s, ok := sold(ctx, b, id)
		if !ok {
			return fmt.Errorf("read the product from b after the kill")
		}
		soldAtKill = s
		// The product is not blocked: a survivor sells again. The deadline
		// is generous; the time it took is logged, not asserted.
		if err := waitSold(ctx, b, id, s, 30*time.Second); err != nil {
			return fmt.Errorf("after the kill: %w", err)
		}
		takeover = time.Since(killedAt)
		return nil
	}
	rate := pick(100, 150)
	cfg := saleConfig(id, rate, pick(6*time.Second, 12*time.Second), b, cc, a)
	rep := c.sale(cfg, control, fault, nil)

	t.Logf("killed %s (pid %d) with %d sold; lock in Redis after the kill: owner %q, %v left; first order after the kill %v later",
		a.name, a.pid(), soldAtKill, leaseOwner, leaseLeft, takeover.Round(time.Millisecond))
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if rep.After.Stock != 0 {
		t.Errorf("stock after the sale: got %d, want 0 (the sale should complete on the survivors)", rep.After.Stock)
	}
	if leaseOwner == "" {
		// Not a failure of the service, but this run did not test a
		// takeover: say so loudly.
		t.Logf("WARNING: no lock in Redis right after the kill; the victim may not have been holding it")
	}
	if rep.ByOutcome["error"] == 0 {
		t.Errorf("requests to the killed replica: got no transport errors, want some (was it killed mid-sale?)")
	}
}
