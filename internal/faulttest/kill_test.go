package faulttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Scenario 1: kill -9 a replica while it holds the product's lock, in the
// middle of the sale. Its lease is not released and not renewed; it runs
// out within LOCK_TTL and the survivors take the lock over, so the product
// is not blocked and the sale completes. The killed replica stays a load
// test target: requests to it fail to connect, and the checker counts them
// as unknown outcomes, which invariant (4) allows for. The fault is shown
// by Redis itself: the lock's key expires (an expired-key event), which a
// live holder's key never does, since it is released or renewed.
func TestKill9ReplicaHoldingLock(t *testing.T) {
	t.Parallel()
	killReplica(t, sqlite, false)
}

// Scenario 1 on PostgreSQL: the killed holder's connections die with it,
// and their transactions with them; the survivors sell the rest.
func TestKill9ReplicaHoldingLockPostgres(t *testing.T) {
	t.Parallel()
	killReplica(t, postgres, false)
}

// Negative control of scenario 1: the same sale and kill with the local
// lock mode (a mutex per process, no fence) must oversell. A chaos pause
// inside every critical section makes the replicas' critical sections
// overlap for certain, so the lost update does not depend on luck.
func TestKill9ReplicaControlLocalLockOversells(t *testing.T) {
	t.Parallel()
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

	// A stock the sale sells out, since it must complete on the
	// survivors, but not before the kill: the survivors sell between the
	// victim's holds while the test looks for one, which a loaded machine
	// makes slow, and a kill after the sale leaves nothing to show. More on
	// PostgreSQL, where every statement is a round trip to another
	// process.
	stock := pick(100, 300)
	if db == postgres && !longForm {
		stock = 200
	}
	id := createProduct(t, b, stock)
	minSold := int64(5)

	var killedAt time.Time
	var soldAtKill int64
	var takeover time.Duration
	var leaseOwner string
	var leaseLeft time.Duration
	fault := func(ctx context.Context) error {
		var expired *redis.PubSub
		if !control {
			rc := redis.NewClient(&redis.Options{Addr: c.redis[0].Addr(), MaxRetries: -1})
			defer rc.Close()
			var err error
			if expired, err = watchExpiry(ctx, rc); err != nil {
				return err
			}
			defer expired.Close()
		}
		if _, err := waitHoldStart(ctx, a, b, id, minSold, 30*time.Second); err != nil {
			return err
		}
		if expired != nil {
			if err := skipEvents(ctx, expired); err != nil {
				return err
			}
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
		if expired != nil {
			// The survivors sold only once the lock was free: if the dead
			// replica held it, its key has expired by now, and the event
			// is on its way.
			if err := waitExpired(ctx, expired, lockKey(id), 10*time.Second); err != nil {
				return fmt.Errorf("fault not injected: the lock's key did not expire after the kill (owner right after it %q, %v left), so %s was not holding the lock: %w",
					leaseOwner, leaseLeft, a.name, err)
			}
		}
		// The sale completes on the survivors, and ends then.
		return waitSoldOut(ctx, b, id, 30*time.Second)
	}
	cfg := saleConfig(id, pick(100, 150), b, cc, a)
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
	if rep.ByOutcome["error"] == 0 {
		t.Errorf("requests to the killed replica: got no transport errors, want some (was it killed mid-sale?)")
	}
}

// watchExpiry turns on the expired-key events of c's Redis (the test's
// own server) and subscribes to them. The subscription is confirmed when
// it returns, so no later event is missed.
func watchExpiry(ctx context.Context, c *redis.Client) (*redis.PubSub, error) {
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err(); err != nil {
		return nil, fmt.Errorf("turn on expired-key events: %w", err)
	}
	ps := c.Subscribe(ctx, "__keyevent@0__:expired")
	if _, err := ps.Receive(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("subscribe to expired-key events: %w", err), ps.Close())
	}
	return ps, nil
}

// skipEvents drops the events ps has had so far, so that what it receives
// next happened from now on: a PING through the subscription is answered
// after every event published before it.
func skipEvents(ctx context.Context, ps *redis.PubSub) error {
	const mark = "faulttest: events before this are skipped"
	if err := ps.Ping(ctx, mark); err != nil {
		return fmt.Errorf("ping the expired-key subscription: %w", err)
	}
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return fmt.Errorf("skip the expired-key events so far: %w", err)
		}
		if p, ok := msg.(*redis.Pong); ok && p.Payload == mark {
			return nil
		}
	}
}

// waitExpired waits for the expired-key event of key on ps, for at most
// timeout.
func waitExpired(ctx context.Context, ps *redis.PubSub, key string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		if msg.Payload == key {
			return nil
		}
	}
}
