package faulttest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// Scenario 7: a Sentinel failover mid-sale. The Redis deployment is one
// master, one replica and three sentinels; both seckill replicas find the
// master through the sentinels (REDIS_SENTINEL_MASTER, _ADDRS). While
// replica a is inside a purchase's critical section:
//
//  1. a is stopped (SIGSTOP), as in scenario 3, so that it stays inside
//     across everything that follows;
//  2. the Redis replica falls behind: replication is cut (a partition
//     between master and replica, clients still reaching the master), and
//     b goes on using the lock once a's lease (1 s) has run out;
//  3. the master is killed (kill -9); the sentinels promote the replica
//     (about 2 s) and the clients follow the switch; the test then
//     restarts the old master as the new one's replica, as an operator
//     would;
//  4. a is continued, and finishes its purchase with a stock it read before
//     all of this.
//
// On one host, replication outruns any kill: without step 2 the replica
// always has every lock, and the runs with and without LOCK_WAIT_REPLICAS
// are the same. Step 2 is the case WAIT is for. Without WAIT, b's
// acquisitions during the cut live on the master only: the failover
// forgets them, and the new master's fence counter is behind the tokens b
// already used. Its next token is its clock, still larger (as after the
// stale snapshot of scenario 6), so the fence accepts the next claims and
// the orders' fences keep increasing. With LOCK_WAIT_REPLICAS=1, no
// acquisition succeeds during the cut (the replica cannot acknowledge it)
// nor between the promotion and the old master's return (the new master
// has no replica), so the failover forgets no lock. Both are checked. In
// both runs the fence refuses a's late write, and nothing is oversold.
func TestSentinelFailoverMidSale(t *testing.T) {
	t.Parallel()
	var results []failoverResult
	for _, wait := range []int{0, 1} {
		t.Run("LOCK_WAIT_REPLICAS="+strconv.Itoa(wait), func(t *testing.T) {
			results = append(results, sentinelFailover(t, wait, false))
		})
	}
	t.Log("LOCK_WAIT_REPLICAS  sold in the cut  counter behind  failover  resumed  claims refused  leases lost  busy (fault)  busy (sale)  sold  attempts")
	for _, r := range results {
		t.Logf("%-18d  %-15d  %-14v  %-8v  %-7v  %-14v  %-11v  %-12v  %-11d  %-4d  %d",
			r.wait, r.soldInCut, r.counterLag.Round(10*time.Millisecond), r.failover.Round(10*time.Millisecond), r.resumed.Round(10*time.Millisecond),
			r.claimRejections, r.leasesLost, r.busyInFault, r.busy, r.sold, r.attempts)
	}
}

// Negative control of scenario 7: the same failover with
// UNSAFE_NO_FENCE=true oversells. a read the stock before the cut and
// writes it back, minus one, after b's sales.
func TestSentinelFailoverControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	sentinelFailover(t, 0, true)
}

// failoverResult is what one run of scenario 7 saw.
type failoverResult struct {
	wait int
	// soldInCut is the orders made while replication was cut.
	soldInCut int64
	// counterLag is how far the promoted replica's fence counter was
	// behind the master's at the kill. Tokens are the server's clock in
	// microseconds, so this is about the time from the cut to the last
	// acquisition before the kill (one refused by WAIT included).
	counterLag time.Duration
	// failover runs from the kill until every sentinel names the new
	// master; resumed from the kill until the first order after that.
	failover, resumed time.Duration
	// From the replicas' /metrics at the end: fence claims refused, leases
	// lost; and b's busy answers from the cut to the resumption.
	claimRejections, leasesLost, busyInFault float64
	// The load test's 201s and 503 busy answers over the whole sale.
	sold, busy int
	attempts   int
}

func sentinelFailover(t *testing.T, wait int, control bool) failoverResult {
	res := failoverResult{wait: wait}
	for res.attempts = 1; res.attempts <= maxFaultAttempts; res.attempts++ {
		if failoverOnce(t, wait, control, &res) || t.Failed() {
			return res
		}
	}
	t.Fatalf("fault not injected in %d attempts: none caught replica a inside its critical section (and, without WAIT, had a failover forget a lock)", maxFaultAttempts)
	return res
}

// observed is what the fault of scenario 7 records as it goes.
type observed struct {
	notes []string
	// Orders when replication was cut, at the kill, and once every
	// sentinel named the new master.
	soldAtCut, soldAtKill, soldAtFailover int64
	// b's busy answers at the cut and when the sale resumed.
	busyAtCut, busyAtResume float64
	// The fence counter at the kill on the master and on the cut-off
	// replica, which the failover promotes.
	counterAtKill, replicaCounterAtKill int64
	failover, resumed                   time.Duration
}

func (o *observed) note(format string, args ...any) {
	o.notes = append(o.notes, fmt.Sprintf(format, args...))
}

// failoverOnce runs the scenario on a fresh deployment. It returns false
// when the stopped replica turned out not to have been inside its critical
// section (no evidence), so that the caller runs it again.
func failoverOnce(t *testing.T, wait int, control bool, res *failoverResult) bool {
	const ttl = time.Second
	s := redistest.StartSentinel(t, "seckill", redistest.SentinelOptions{})
	env := map[string]string{
		"DATABASE":              filepath.Join(t.TempDir(), "seckill.db"),
		"REDIS_SENTINEL_MASTER": s.Name,
		"REDIS_SENTINEL_ADDRS":  strings.Join(s.Addrs(), ","),
		"LOCK_TTL":              ttl.String(),
		"LOCK_WAIT":             "2s",
		"LOCK_WAIT_REPLICAS":    strconv.Itoa(wait),
	}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	// The victim pauses inside every critical section, after reading the
	// stock and before writing, so that a SIGSTOP sent while it holds the
	// lock almost certainly lands there.
	a := startReplica(t, "a", with(env, "CHAOS_PAUSE", "300ms"))
	b := startReplica(t, "b", env)

	// More than the sale can sell: b sells the requests queued behind a's
	// lock at once when the lease runs out, and the sale must still have
	// stock to resume with after the failover, however long that takes.
	rate := pick(60, 100)
	stock := plenty(rate)
	id := createProduct(t, b, int(stock))

	var o observed
	var evidence string
	fault := func(ctx context.Context) error {
		before, err := waitFreshHold(ctx, a, b, id, 3, 30*time.Second)
		if err != nil {
			return err
		}
		if err := a.pause(); err != nil {
			return err
		}
		// From here on, a must be continued whatever happens.
		err = failover(ctx, s, a, b, id, &o)
		if cerr := a.resume(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		evidence, err = waitEvidence(ctx, a, b, id, stock, before, control)
		return err
	}
	cfg := saleConfig(id, rate, b, a)
	cfg.ExpectOversell = control
	rep := runSale(t, cfg, fault)
	t.Logf("attempt %d: %s; %s", res.attempts, strings.Join(o.notes, "; "), orNone(evidence))

	ma, mb := mustScrape(t, a), mustScrape(t, b)
	res.soldInCut = o.soldAtKill - o.soldAtCut
	res.counterLag = time.Duration(o.counterAtKill-o.replicaCounterAtKill) * time.Microsecond
	res.failover, res.resumed = o.failover, o.resumed
	res.claimRejections = ma[mFenceClaim] + mb[mFenceClaim]
	res.leasesLost = ma[mLeasesLost] + mb[mLeasesLost]
	res.busyInFault = o.busyAtResume - o.busyAtCut
	res.sold, res.busy = rep.Created, rep.ByOutcome["503 busy"]
	t.Logf("LOCK_WAIT_REPLICAS=%d: %s: leases lost %v, fence rejections claim %v write %v, busy %v; %s: leases lost %v, fence rejections claim %v write %v, busy %v (%v from the cut to the resumption)",
		wait, a.name, ma[mLeasesLost], ma[mFenceClaim], ma[mFenceWrite], ma[mBusy],
		b.name, mb[mLeasesLost], mb[mFenceClaim], mb[mFenceWrite], mb[mBusy], res.busyInFault)
	if evidence == "" {
		// Stopped just after its critical section: the fence was not
		// tested. With the fence on, the sale must still be exact.
		if !control {
			assertSafe(t, rep)
		}
		return false
	}
	if control {
		assertOversold(t, rep)
		return true
	}
	assertSafe(t, rep)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	orders, err := b.api().Orders(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	assertFencesIncrease(t, orders)
	// A purchase inside its critical section across the failover may be
	// refused once, as in scenario 3; more would be reissued tokens.
	if mb[mFenceClaim] > 1 {
		t.Errorf("%v fence claims refused on %s, want at most 1: the new master's tokens were not larger than the ones used before the failover", mb[mFenceClaim], b.name)
	}
	if rep.After.Sold <= o.soldAtFailover {
		t.Errorf("orders after the sale: got %d, want more than the %d there were after the failover", rep.After.Sold, o.soldAtFailover)
	}
	if ma[mLeasesLost] < 1 {
		t.Errorf("leases lost by %s, stopped across the failover for longer than its %v lease: got %v, want >= 1", a.name, ttl, ma[mLeasesLost])
	}
	if wait > 0 {
		// Cut off, then dead, then promoted without a replica of its own:
		// from the cut until the old master's return, no replica could
		// acknowledge a lock.
		if n := o.soldAtFailover - o.soldAtCut; n != 0 {
			t.Errorf("with LOCK_WAIT_REPLICAS=%d, %d orders from the cut to the failover, want 0: no replica could acknowledge a lock", wait, n)
		}
		return true
	}
	if res.soldInCut == 0 || res.counterLag <= 0 {
		// Safe, but the failover forgot nothing: the case this run is
		// about did not happen. Run it again.
		t.Logf("attempt %d: fault not injected: %d sold while replication was cut, the promoted replica's fence counter %v behind: no failover that forgets locks",
			res.attempts, res.soldInCut, res.counterLag)
		return false
	}
	return true
}

// failover is steps 2 and 3 of scenario 7, with a stopped: cut
// replication, let b use the lock once a's lease has run out, kill the
// master, wait for the failover, bring the old master back as a replica,
// and wait for b to sell again. It records what it sees in o.
func failover(ctx context.Context, s *redistest.Sentinel, a, b *replica, id int64, o *observed) error {
	owner, _, err := lockState(ctx, s.Master.Addr(), id)
	if err != nil {
		return fmt.Errorf("read the lock: %w", err)
	}
	var ok bool
	o.soldAtCut, ok = sold(ctx, b, id)
	mb, err := scrape(ctx, b)
	if !ok || err != nil {
		return fmt.Errorf("read the product and metrics from %s: %v", b.name, err)
	}
	o.busyAtCut = mb[mBusy]
	if err := s.CutReplication(ctx); err != nil {
		return fmt.Errorf("cut replication: %w", err)
	}
	cutAt := time.Now()
	o.note("%s stopped with %d sold, holding the lock (owner %q); replication cut", a.name, o.soldAtCut, owner)

	// b uses the lock once a's lease has run out: wait for that in Redis,
	// then for three of b's purchases to end.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var answeredAt float64
	err = poll.Until(wctx, 5*time.Millisecond, func() (bool, error) {
		lockOwner, _, err := lockState(wctx, s.Master.Addr(), id)
		if err != nil || lockOwner == owner {
			return false, nil
		}
		m, err := scrape(wctx, b)
		answeredAt = answered(m)
		return err == nil, nil
	})
	if err == nil {
		err = poll.Until(wctx, 5*time.Millisecond, func() (bool, error) {
			m, err := scrape(wctx, b)
			return err == nil && answered(m) >= answeredAt+3, nil
		})
	}
	if err != nil {
		return fmt.Errorf("waiting for %s to use the lock after %s's lease: %w", b.name, a.name, err)
	}
	if o.soldAtKill, ok = sold(ctx, b, id); !ok {
		return fmt.Errorf("read the product from %s", b.name)
	}
	if o.counterAtKill, err = fenceCounter(ctx, s.Master.Addr(), id); err != nil {
		return fmt.Errorf("read the master's fence counter: %w", err)
	}
	if o.replicaCounterAtKill, err = fenceCounter(ctx, s.Replica.Addr(), id); err != nil {
		return fmt.Errorf("read the replica's fence counter: %w", err)
	}
	oldPID := s.Master.PID()
	if err := s.Master.Kill(); err != nil {
		return err
	}
	killedAt := time.Now()
	o.note("%v later %d sold, the fence counter at %d on the master and %d on the replica; master (pid %d) killed",
		killedAt.Sub(cutAt).Round(time.Millisecond), o.soldAtKill, o.counterAtKill, o.replicaCounterAtKill, oldPID)

	if err := s.WaitMaster(wctx, s.Replica.Addr()); err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	o.failover = time.Since(killedAt)
	// A purchase b began before the kill may have finished after it; the
	// sale has resumed when an order comes after the failover.
	if o.soldAtFailover, ok = sold(ctx, b, id); !ok {
		return fmt.Errorf("read the product from %s", b.name)
	}
	// Watch for that order while the old master comes back: without WAIT
	// it need not wait for the old master.
	resumed := make(chan error, 1)
	go func() {
		err := waitSold(ctx, b, id, o.soldAtFailover, 30*time.Second)
		o.resumed = time.Since(killedAt)
		if m, serr := scrape(ctx, b); serr == nil {
			o.busyAtResume = m[mBusy]
		}
		resumed <- err
	}()
	err = s.Rejoin(wctx, s.Master, s.Replica.Addr())
	if rerr := <-resumed; err == nil && rerr != nil {
		err = fmt.Errorf("after the failover: %w", rerr)
	}
	if err != nil {
		return err
	}
	o.note("every sentinel named the replica %v after the kill (%d sold), and the old master was restarted as its replica; first order after the failover %v after the kill",
		o.failover.Round(time.Millisecond), o.soldAtFailover, o.resumed.Round(time.Millisecond))
	return nil
}

// waitFreshHold polls until the product has at least minSold orders and
// r has since taken the product's lock anew, and still holds it a poll
// later; it returns r's metrics of that moment. r then is a few
// milliseconds into its critical section: past its claim and its reads,
// and far from the end of its chaos pause. (The first sight of a hold
// may be the end of one: when r's own write is the order that reaches
// minSold, r still counts as holding while its release is on the way to
// Redis, and a signal then lands after the write.)
func waitFreshHold(ctx context.Context, r, observer *replica, id, minSold int64, timeout time.Duration) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	acquisitions := func(m metrics) float64 { return m[mAcqUncontended] + m[mAcqContended] }
	start, seen := -1.0, -1.0 // acquisitions when minSold was reached, and at the last sight of a hold
	var m metrics
	err := poll.Until(ctx, 2*time.Millisecond, func() (bool, error) {
		var err error
		if start < 0 {
			if s, ok := sold(ctx, observer, id); !ok || s < minSold {
				return false, nil
			}
			if m, err = scrape(ctx, r); err == nil {
				start = acquisitions(m)
			}
			return false, nil
		}
		if m, err = scrape(ctx, r); err != nil {
			return false, nil
		}
		acq := acquisitions(m)
		if acq == start || m.held() < 1 {
			seen = -1
			return false, nil
		}
		if acq == seen {
			return true, nil // the same hold, seen twice
		}
		seen = acq
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %s to take the lock anew with %d orders made: %w", r.name, minSold, err)
	}
	return m, nil
}

// answered is the purchases the replica has answered, whatever the
// outcome.
func answered(m metrics) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "seckill_purchases_total{") {
			n += v
		}
	}
	return n
}

func orNone(evidence string) string {
	if evidence == "" {
		return "no evidence that a was inside its critical section"
	}
	return evidence
}

// fenceCounter reads a product's fence counter (the last token issued) in
// the Redis at addr; 0 when it has none.
func fenceCounter(ctx context.Context, addr string, id int64) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	n, err := c.Get(ctx, lockKey(id)+":fence").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
