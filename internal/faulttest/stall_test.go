package faulttest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Scenario 2: SIGSTOP a replica while it is inside a purchase's critical
// section, for longer than the lease, then SIGCONT. Stopped, it cannot
// renew; its lease runs out and the other replica takes the lock with a
// newer fencing token and sells. When the stalled replica wakes up, it
// carries on from where it stopped, with a stock it read before the other
// replica's sales: the fence must refuse that write. Its fence rejections
// must be > 0, or the scenario did not test anything.
func TestSIGSTOPHolderPastLease(t *testing.T) {
	stallHolder(t, sqlite, false)
}

// Negative control of scenario 2: the same stall with UNSAFE_NO_FENCE=true.
// The stalled replica's write goes through and oversells: the lease
// alone cannot stop a holder that was paused.
func TestSIGSTOPHolderControlNoFenceOversells(t *testing.T) {
	stallHolder(t, sqlite, true)
}

// Scenario 2 on PostgreSQL: the woken holder's fenced write runs at READ
// COMMITTED against a row the other replica's claim has moved on, and must
// be refused all the same.
func TestSIGSTOPHolderPastLeasePostgres(t *testing.T) {
	stallHolder(t, postgres, false)
}

// Its control on PostgreSQL: without the fence, the database's row locks
// and transactions do not stop the woken holder's stale write-back.
func TestSIGSTOPHolderControlNoFenceOversellsPostgres(t *testing.T) {
	stallHolder(t, postgres, true)
}

// maxFaultAttempts bounds the retries of a fault that needs the victim to
// be inside its critical section when the signal lands. With a chaos pause
// it almost always is; a retry covers the rare scrape that came just
// before the pause ended.
const maxFaultAttempts = 3

func stallHolder(t *testing.T, db database, control bool) {
	const ttl = time.Second
	c := newCluster(t, 1, db)
	env := map[string]string{"LOCK_TTL": ttl.String(), "LOCK_WAIT": "2s"}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	// The victim pauses inside every critical section, after reading the
	// stock and before writing, so a SIGSTOP sent while it holds the lock
	// almost certainly lands there: it has read a stock that will be stale
	// when it wakes up.
	a := c.replica("a", with(env, "CHAOS_PAUSE", "300ms"))
	b := c.replica("b", env)

	stock := stockFor(db, 60, 150, 200)
	id := createProduct(t, b, stock)

	var notes []string
	fault := func(ctx context.Context) error {
		for attempt := 1; attempt <= maxFaultAttempts; attempt++ {
			before, err := waitHoldStart(ctx, a, b, id, 3, 30*time.Second)
			if err != nil {
				return fmt.Errorf("attempt %d: %w; before it: %v", attempt, err, notes)
			}
			done, note, err := stallOnce(ctx, a, b, id, int64(stock), before, ttl, control)
			notes = append(notes, fmt.Sprintf("attempt %d: %s", attempt, note))
			if err != nil || done {
				return err
			}
		}
		return fmt.Errorf("%d attempts, none caught %s inside its critical section: %v", maxFaultAttempts, a.name, notes)
	}
	cfg := saleConfig(id, pick(60, 100), pick(6*time.Second, 15*time.Second), b, a)
	cfg.ExpectOversell = control
	c.warmUp(cfg)
	rep := runSale(t, cfg, fault)
	for _, l := range notes {
		t.Log(l)
	}

	// Leases lost is logged, not asserted: when the stalled holder wakes
	// up, its write and Release may run before the lock's watchdog looks
	// at the lease, and Release returns ErrLeaseLost to its caller without
	// telling the Observer, so the metric misses that loss.
	ma, mb := mustScrape(t, a), mustScrape(t, b)
	t.Logf("%s: fence rejections claim %v write %v, leases lost %v, renewal failures %v; %s: fence rejections %v, leases lost %v",
		a.name, ma[mFenceClaim], ma[mFenceWrite], ma[mLeasesLost], ma[mRenewalFailures],
		b.name, mb.fenceRejections(), mb[mLeasesLost])
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if ma.fenceRejections() == 0 {
		t.Errorf("fence rejections of the stalled replica: got 0, want > 0: the scenario did not test the fence")
	}
}

// stallOnce stops a (which the caller saw holding the lock, with metrics
// before), waits until b has sold something (b can only have done so with
// the lock, so a's lease has run out and b's token is newer), and
// continues a. Then it waits for the evidence that a was caught inside its
// critical section: a fence rejection on a or, in the control, the
// oversell itself. done is false when the evidence does not come: a was
// stopped just after it left the critical section, and the caller tries
// again.
func stallOnce(ctx context.Context, a, b *replica, id, s int64, before metrics, ttl time.Duration, control bool) (done bool, note string, err error) {
	if err := a.signal(syscall.SIGSTOP); err != nil {
		return false, "", err
	}
	stoppedAt := time.Now()
	soldAtStop, ok := sold(ctx, b, id)
	if !ok {
		_ = a.signal(syscall.SIGCONT)
		return false, "", fmt.Errorf("read the product from %s", b.name)
	}
	// The lease has to run out (TTL) before b can sell; the deadline is
	// generous and is not an assertion on speed.
	waitErr := waitSold(ctx, b, id, soldAtStop, ttl+20*time.Second)
	stopped := time.Since(stoppedAt)
	if err := a.signal(syscall.SIGCONT); err != nil {
		return false, "", err
	}
	if waitErr != nil {
		return false, "", fmt.Errorf("%s stopped: %w", a.name, waitErr)
	}
	note = fmt.Sprintf("%s stopped for %v with %d sold, until %s sold more", a.name, stopped.Round(time.Millisecond), soldAtStop, b.name)

	evidence, err := waitEvidence(ctx, a, b, id, s, before, control)
	if err != nil {
		return false, "", err
	}
	if evidence == "" {
		return false, note + "; no evidence that it was inside its critical section", nil
	}
	return true, note + "; " + evidence, nil
}
