package faulttest

import (
	"context"
	"fmt"
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
	t.Parallel()
	stallHolder(t, sqlite, false)
}

// Negative control of scenario 2: the same stall with UNSAFE_NO_FENCE=true.
// The stalled replica's write goes through and oversells: the lease
// alone cannot stop a holder that was paused.
func TestSIGSTOPHolderControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	stallHolder(t, sqlite, true)
}

// Scenario 2 on PostgreSQL: the woken holder's fenced write runs at READ
// COMMITTED against a row the other replica's claim has moved on, and must
// be refused all the same.
func TestSIGSTOPHolderPastLeasePostgres(t *testing.T) {
	t.Parallel()
	stallHolder(t, postgres, false)
}

// Its control on PostgreSQL: without the fence, the database's row locks
// and transactions do not stop the woken holder's stale write-back.
func TestSIGSTOPHolderControlNoFenceOversellsPostgres(t *testing.T) {
	t.Parallel()
	stallHolder(t, postgres, true)
}

func stallHolder(t *testing.T, db database, control bool) {
	const ttl = time.Second
	h := newHolderSale(t, db, ttl, control)
	a, b := h.a, h.b
	rep := h.run(func(ctx context.Context, before metrics) (bool, string, error) {
		return stallOnce(ctx, a, b, h.id, h.stock, before, ttl, control)
	})

	ma, mb := mustScrape(t, a), mustScrape(t, b)
	t.Logf("%s: fence rejections claim %v write %v, leases lost %v, renewal failures %v; %s: fence rejections %v, leases lost %v",
		a.name, ma[mFenceClaim], ma[mFenceWrite], ma[mLeasesLost], ma[mRenewalFailures],
		b.name, mb.fenceRejections(), mb[mLeasesLost])
	// Stopped until b sold, a woke up past its lease: its watchdog, or
	// its Release, counts the loss.
	if ma[mLeasesLost] == 0 {
		t.Errorf("fault not injected: leases lost by the stalled replica: got 0, want > 0")
	}
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if ma.fenceRejections() == 0 {
		t.Errorf("fault not injected: fence rejections of the stalled replica: got 0, want > 0: the scenario did not test the fence")
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
// controlLead is how many more than one sale a control's scenario waits
// for from the other replica while its holder is caught: enough that the
// holder's stale write-back oversells by more than midWrites.
func controlLead(control bool) int64 {
	if control {
		return midWrites
	}
	return 0
}

func stallOnce(ctx context.Context, a, b *replica, id, s int64, before metrics, ttl time.Duration, control bool) (done bool, note string, err error) {
	if err := a.pause(); err != nil {
		return false, "", err
	}
	stoppedAt := time.Now()
	soldAtStop, ok := sold(ctx, b, id)
	if !ok {
		_ = a.resume()
		return false, "", fmt.Errorf("read the product from %s", b.name)
	}
	// The lease has to run out (TTL) before b can sell; the deadline is
	// generous and is not an assertion on speed: when it passes, a was
	// stopped inside a database write and is tried again. In the control,
	// a's write-back loses what b sold meanwhile: b sells more than
	// midWrites first, so that the oversell is one oversoldNow can tell
	// from purchases between their two writes (a loaded machine's b sells
	// one or two at a time).
	waitErr := waitSold(ctx, b, id, soldAtStop+controlLead(control), ttl+stalledWriterWait)
	stopped := time.Since(stoppedAt)
	if err := a.resume(); err != nil {
		return false, "", err
	}
	if waitErr != nil {
		if ctx.Err() != nil {
			return false, "", ctx.Err()
		}
		return false, fmt.Sprintf("%s stopped for %v with %d sold, and %s did not sell %d more: %s",
			a.name, stopped.Round(time.Millisecond), soldAtStop, b.name, controlLead(control)+1, stoppedInWrite), nil
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
