package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// Scenario 4: the replicas lock with Redlock over three independent
// redis-server processes (REDIS_ADDRS). Mid-sale:
//
//  1. kill -9 one node: a quorum (2 of 3) remains, and the sale goes on;
//  2. kill -9 a second: no quorum, so no purchase gets the lock: buyers
//     get 503 busy and nothing is sold, let alone oversold;
//  3. restart both (empty: no persistence): the sale resumes and
//     completes. The fence counters of the restarted nodes are gone; the
//     surviving node, in every quorum, still has its counter, and the
//     orders' fences keep increasing.
//
// Each phase waits for an observable condition (orders made, busy answers
// counted by the replicas), not for a time, and the sale lasts until the
// last of them, its selling out, however long the phases take.
func TestRedlockNodesDownAndBack(t *testing.T) {
	t.Parallel()
	redlockNodes(t, false)
}

// Negative control of scenario 4: the same sale and node faults with the
// local lock mode (a mutex per process, no fence) oversells. A chaos pause
// makes the replicas' critical sections overlap for certain. The lock
// then ignores Redis, so phase 2 has no effect: the control only waits for
// the kills and restarts, and checks the verdict.
func TestRedlockControlLocalLockOversells(t *testing.T) {
	t.Parallel()
	redlockNodes(t, true)
}

func redlockNodes(t *testing.T, control bool) {
	c := newCluster(t, 3, sqlite)
	env := map[string]string{
		// A 5 s lease gives Redlock a 50 ms per-node timeout (TTL/100,
		// capped): on a loaded machine a 10 ms one (from a 1 s lease)
		// turns slow answers into busy purchases. No lease has to run out
		// in this scenario, so its length costs nothing.
		"LOCK_TTL": "5s",
		// Busy answers come fast once the quorum is gone (the attempt fails
		// at once); a short wait keeps buyers that queue behind a holder
		// from waiting long when it does.
		"LOCK_WAIT": "1s",
		// One purchase per lock hold: the phases wait for a few orders
		// each, and a batch of dozens could sell out what is left before
		// the second kill, leaving no purchase to be refused for want of
		// a quorum.
		"BATCH_MAX": "1",
	}
	if control {
		env = with(env, "LOCK", "local", "CHAOS_PAUSE", "50ms")
	}
	a := c.replica("a", env)
	b := c.replica("b", env)

	// A stock the sale sells out once the nodes are back, but not before:
	// on a loaded machine the sale goes on while the test looks for each
	// phase's condition, and a sale sold out before the restart has no
	// purchase left to resume.
	stock := pick(100, 300)
	id := createProduct(t, a, stock)
	replicas := []*replica{a, b}

	var notes []string
	var soldAtOne, afterOne, soldAtTwo int64
	var whileDown quorum
	logf := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	fault := func(ctx context.Context) error {
		// Phase 1: one node down, the sale goes on.
		if err := waitSold(ctx, a, id, 10, 30*time.Second); err != nil {
			return err
		}
		if err := c.redis[0].Kill(); err != nil {
			return err
		}
		s, _ := sold(ctx, a, id)
		soldAtOne = s
		// Few: with a node down, every Redlock call waits out its node
		// timeout for the dead one (go-redis keeps retrying the dial), and
		// selling slows down several times over.
		if err := waitSold(ctx, a, id, s+5, 30*time.Second); err != nil {
			return fmt.Errorf("with one node down: %w", err)
		}
		afterOne, _ = sold(ctx, a, id)
		logf("node 0 killed with %d sold; %d sold with 2 of 3 nodes", s, afterOne)

		// Phase 2: two nodes down.
		if err := c.redis[1].Kill(); err != nil {
			return err
		}
		soldAtTwo, _ = sold(ctx, a, id)
		if !control {
			// No lock can be acquired with 1 of 3 nodes. Show it between
			// two observations: first, 20 busy answers after the kill and
			// no lock held on either replica (a purchase that held the
			// lock at the kill has finished: its release waits out the
			// dead nodes' timeouts); then 20 more busy answers. Between the
			// two, neither the lock acquisitions nor the orders may move.
			q0, err := quorumState(ctx, replicas, a, id)
			if err != nil {
				return err
			}
			if err := waitQuorumState(ctx, replicas, a, id, func(q quorum) bool {
				return q.busy >= q0.busy+20 && q.held == 0
			}); err != nil {
				return fmt.Errorf("with two nodes down: %w", err)
			}
			q1, err := quorumState(ctx, replicas, a, id)
			if err != nil {
				return err
			}
			if err := waitQuorumState(ctx, replicas, a, id, func(q quorum) bool {
				return q.busy >= q1.busy+20
			}); err != nil {
				return fmt.Errorf("with two nodes down: %w", err)
			}
			q2, err := quorumState(ctx, replicas, a, id)
			if err != nil {
				return err
			}
			whileDown = q2.sub(q1)
			logf("node 1 killed with %d sold; then %v, then %v, then %v", soldAtTwo, q0, q1, q2)
		}

		// Phase 3: both back, empty; the sale resumes.
		for _, i := range []int{0, 1} {
			if err := c.redis[i].Server.Restart(ctx); err != nil {
				return fmt.Errorf("restart node %d: %w", i, err)
			}
		}
		s, _ = sold(ctx, a, id)
		if err := waitSold(ctx, a, id, s, 30*time.Second); err != nil {
			return fmt.Errorf("after restarting the nodes: %w", err)
		}
		logf("nodes 0 and 1 restarted with %d sold; the sale resumed", s)
		// The sale completes, and ends then.
		return waitSoldOut(ctx, a, id, 30*time.Second)
	}
	cfg := saleConfig(id, pick(100, 150), a, b)
	rep := c.sale(cfg, control, fault, &notes)
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if afterOne <= soldAtOne {
		t.Errorf("orders with one node down: got %d, want more than the %d at the kill: the sale should go on", afterOne, soldAtOne)
	}
	if whileDown.acquired != 0 || whileDown.sold != 0 {
		t.Errorf("with two of three nodes down, between two observations %d busy answers apart: got %d locks acquired and %d orders, want 0 and 0",
			whileDown.busy, whileDown.acquired, whileDown.sold)
	}
	if rep.ByOutcome["503 busy"] == 0 {
		t.Errorf("503 busy answers: got 0, want some while two nodes were down")
	}
	if rep.After.Stock != 0 {
		t.Errorf("stock after the sale: got %d, want 0 (the sale should complete once the nodes are back)", rep.After.Stock)
	}
	orders, err := a.api().Orders(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	assertFencesIncrease(t, orders)
}

// quorum is what the replicas report while Redis nodes are down: busy
// answers, lock acquisitions and locks held, summed over the replicas, and
// the product's orders.
type quorum struct {
	busy, acquired, held, sold int64
}

func (q quorum) sub(o quorum) quorum {
	return quorum{q.busy - o.busy, q.acquired - o.acquired, q.held - o.held, q.sold - o.sold}
}

func (q quorum) String() string {
	return fmt.Sprintf("busy %d, acquired %d, held %d, sold %d", q.busy, q.acquired, q.held, q.sold)
}

// quorumState scrapes every replica and reads the product through r.
func quorumState(ctx context.Context, rs []*replica, r *replica, id int64) (quorum, error) {
	var q quorum
	for _, rr := range rs {
		m, err := scrape(ctx, rr)
		if err != nil {
			return q, err
		}
		q.busy += int64(m[mBusy])
		q.acquired += int64(m[mAcqUncontended] + m[mAcqContended])
		q.held += int64(m.held())
	}
	p, err := r.api().Product(ctx, id)
	q.sold = p.Sold
	return q, err
}

// waitQuorumState polls quorumState until cond holds.
func waitQuorumState(ctx context.Context, rs []*replica, r *replica, id int64, cond func(quorum) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return poll.Until(ctx, 5*time.Millisecond, func() (bool, error) {
		q, err := quorumState(ctx, rs, r, id)
		return err == nil && cond(q), nil
	})
}
