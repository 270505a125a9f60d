package demo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
)

// The steps of the lock design's reservation rows (matrix_lifelock.go
// says what each proves): run by lifeSale at the moments its lifePlan
// names, each reads the replicas' /metrics and the orders listed, and
// keeps what it saw in the row's expiryEvidence.

// The series the steps read of a replica's /metrics.
const (
	mExpired    = `seckill_orders_closed_total{state="expired"}`
	mContended  = `seckill_lock_acquisitions_total{contended="true"}`
	mInProgress = `seckill_expiries_in_progress`
	mLocksHeld  = `seckill_locks_held`
	mFenceWrite = `seckill_fence_rejections_total{stage="write"}`
	mLeasesLost = `seckill_lock_leases_lost_total`
)

// countExpiries, once the pays and cancels are answered and before the
// lapsing orders are due, takes each replica's count of expired orders
// and of contended acquisitions so far; expiredTogether, once none is
// pending, adds the counts then: what each replica did while the lapsed
// orders were expired, when no purchase or cancel takes the lock.
func countExpiries(ctx context.Context, r *lifeRun) (string, error) {
	return "", r.addExpiries(ctx, -1)
}

func expiredTogether(ctx context.Context, r *lifeRun) (string, error) {
	err := r.addExpiries(ctx, 1)
	x := r.ev.expiry
	fmt.Fprintf(r.w, "while the lapsed orders were expired: replica 1 expired %d and found the lock held %d time(s), replica 2 expired %d and found it held %d time(s)\n",
		x.expired[0], x.contended[0], x.expired[1], x.contended[1])
	return "", err
}

func (r *lifeRun) addExpiries(ctx context.Context, sign int64) error {
	x := &r.ev.expiry
	for i, url := range r.c.urls[:2] {
		m, err := scrapeMetrics(ctx, url, mExpired, mContended)
		if err != nil {
			return err
		}
		x.expired[i] += sign * m[mExpired]
		x.contended[i] += sign * m[mContended]
	}
	return nil
}

// awaitExpiring waits until replica 2 is inside an expiry's critical
// section, its seckill_expiries_in_progress at least 1, and returns that
// read of its /metrics, with series too.
func (r *lifeRun) awaitExpiring(ctx context.Context, series ...string) (map[string]int64, error) {
	var m map[string]int64
	err := awaitFault(ctx, func() (bool, error) {
		var err error
		m, err = scrapeMetrics(ctx, r.c.urls[1], append([]string{mInProgress}, series...)...)
		return err == nil && m[mInProgress] >= 1, err
	})
	return m, err
}

// killMidExpiry kills replica 2 with SIGKILL once it is in an expiry's
// critical section, and waits for replica 1 to expire the orders due
// then.
func killMidExpiry(ctx context.Context, r *lifeRun) (string, error) {
	x := &r.ev.expiry
	m, err := r.awaitExpiring(ctx, mLocksHeld)
	if err != nil {
		return "the victim was never in an expiry's critical section: " + err.Error(), nil
	}
	x.held, x.locks = m[mInProgress], m[mLocksHeld]
	if err := r.c.processes[0].kill(); err != nil {
		return "", err
	}
	killed := time.Now()
	r.b = r.a // the victim is gone
	if err := r.takeOver(ctx, killed); err != nil {
		return "", err
	}
	fmt.Fprintf(r.w, "the victim, in its expiry's critical section (%d in progress, %d lock(s) held), killed with SIGKILL with %d order(s) due; the survivor expired %d of them after the kill\n",
		x.held, x.locks, x.due, x.takenOver)
	return "", nil
}

// stopMidExpiry stops replica 2 with SIGSTOP once it is in an expiry's
// critical section, until replica 1 has expired the orders due then (it
// can only once the victim's lease has run out), continues it, and waits
// for the fence to refuse its write.
func stopMidExpiry(ctx context.Context, r *lifeRun) (string, error) {
	x := &r.ev.expiry
	m, err := r.awaitExpiring(ctx, mLocksHeld, mFenceWrite, mLeasesLost)
	if err != nil {
		return "the victim was never in an expiry's critical section: " + err.Error(), nil
	}
	x.held, x.locks = m[mInProgress], m[mLocksHeld]
	victim := r.c.processes[0]
	if err := procutil.Pause(victim.proc.Cmd.Process); err != nil {
		return "", err
	}
	stopped := time.Now()
	err = r.takeOver(ctx, stopped)
	x.stopped = time.Since(stopped)
	if rerr := procutil.Resume(victim.proc.Cmd.Process); rerr != nil || err != nil {
		return "", errors.Join(err, rerr)
	}
	if x.takenOver < x.due {
		return "", nil // missing says so
	}
	err = awaitFault(ctx, func() (bool, error) {
		after, err := scrapeMetrics(ctx, victim.url, mFenceWrite, mLeasesLost)
		x.refused, x.leasesLost = after[mFenceWrite]-m[mFenceWrite], after[mLeasesLost]-m[mLeasesLost]
		return err == nil && x.refused >= 1, err
	})
	fmt.Fprintf(r.w, "the victim, in its expiry's critical section (%d in progress, %d lock(s) held), stopped with SIGSTOP for %v with %d order(s) due; the survivor expired %d of them meanwhile; continued, its writes refused by the fence: %d (%v)\n",
		x.held, x.locks, x.stopped.Round(time.Millisecond), x.due, x.takenOver, x.refused, err)
	return "", nil
}

// takeOver lists the orders pending and due at since, when the victim was
// caught, and waits until replica 1 has expired them: none of them pending
// and each with its closed_at, and replica 1's own count of expired
// orders grown by those it expired after since. A wait that ends first
// leaves its numbers short, for the verdict.
func (r *lifeRun) takeOver(ctx context.Context, since time.Time) error {
	x := &r.ev.expiry
	before, err := scrapeMetrics(ctx, r.c.urls[0], mExpired)
	if err != nil {
		return err
	}
	_, listed, err := r.a.state(ctx)
	if err != nil {
		return err
	}
	var due []int64
	for _, o := range listed {
		if isPending(o) && !o.ExpiresAt.After(since) {
			due = append(due, o.ID)
		}
	}
	if x.due = len(due); x.due == 0 {
		return nil
	}
	listed, err = r.awaitList(ctx, func(l []lifeOrder) bool {
		return !slices.ContainsFunc(l, func(o lifeOrder) bool {
			return slices.Contains(due, o.ID) && unsettled(o)
		})
	})
	if ctx.Err() != nil {
		return err
	}
	for _, o := range listed {
		if slices.Contains(due, o.ID) && o.State == "expired" && o.ClosedAt.After(since) {
			x.takenOver++
		}
	}
	err = awaitFault(ctx, func() (bool, error) {
		m, err := scrapeMetrics(ctx, r.c.urls[0], mExpired)
		x.survivorExpired = m[mExpired] - before[mExpired]
		return err == nil && x.survivorExpired >= int64(x.takenOver), err
	})
	if ctx.Err() != nil {
		return err
	}
	return nil
}

// payRace pays every lapsing order through replica 1 once replica 2's
// expiry is in its critical section: those whose window has ended, which
// that expiry is about to move, and those whose window has not.
func payRace(ctx context.Context, r *lifeRun) (string, error) {
	return r.race(ctx, "payment", func(ctx context.Context) error {
		return each(r.lapses, func(_ int, o lifeOrder) error {
			late := time.Now().After(o.ExpiresAt)
			ok, err := r.move(ctx, r.a, "pay", o)
			r.raced(late, ok, err == nil && !ok)
			return err
		})
	})
}

// buyRace sends raceBuyers new buyers to replica 1 once replica 2's
// unlocked expiry is between its read of the stock and its write of it.
// Then they pay: their orders are not left for the sale to wait on.
func buyRace(ctx context.Context, r *lifeRun) (string, error) {
	users := make([]string, raceBuyers)
	for i := range users {
		users[i] = fmt.Sprintf("race-%d", i)
	}
	var mu sync.Mutex
	var bought []lifeOrder
	missing, err := r.race(ctx, "purchase", func(ctx context.Context) error {
		return each(users, func(_ int, u string) error {
			o, err := r.reserve(ctx, r.a, u)
			r.raced(false, o != nil, false)
			if o != nil {
				mu.Lock()
				bought = append(bought, *o)
				mu.Unlock()
			}
			return err
		})
	})
	if err == nil && missing == "" {
		err = each(bought, func(_ int, o lifeOrder) error { _, err := r.move(ctx, r.a, "pay", o); return err })
	}
	return missing, err
}

// race waits until replica 2's expiry is in its critical section, runs
// send, and records whether that expiry was still before its write once
// send's last request was answered: replica 2's expiries in progress at
// least 1 after, as before, and its count of expired orders, which an
// expiry raises after its write, the same.
func (r *lifeRun) race(ctx context.Context, what string, send func(context.Context) error) (string, error) {
	x := &r.ev.expiry
	before, err := r.awaitExpiring(ctx, mExpired)
	if err != nil {
		return "replica 2's expiry was never in its critical section: " + err.Error(), nil
	}
	if err := send(ctx); err != nil {
		return "", err
	}
	after, err := scrapeMetrics(ctx, r.c.urls[1], mInProgress, mExpired)
	if err != nil {
		return "", err
	}
	x.inRound = after[mInProgress] >= 1 && after[mExpired] == before[mExpired]
	fmt.Fprintf(r.w, "%d %s(s) sent while replica 2's expiry was in its critical section, %d after their window: %d answered 2xx, %d order_expired; that expiry still before its write at the last answer: %v\n",
		x.sent, what, x.sentLate, x.accepted, x.refusedLate, x.inRound)
	return "", nil
}

// raced counts one request of a race: sent after its order's window,
// answered 2xx, answered 409 order_expired.
func (r *lifeRun) raced(late, accepted, expired bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := &r.ev.expiry
	x.sent++
	if late {
		x.sentLate++
	}
	if accepted {
		x.accepted++
	}
	if expired {
		x.refusedLate++
	}
}

// countUnchecked, once no order is pending, compares the orders the
// replicas counted expired with those that lapsed (neither paid nor
// cancelled with a 200): an expiry that checks the state it moves from
// counts each lapsed order once, and no other.
func countUnchecked(ctx context.Context, r *lifeRun) (string, error) {
	var counted int64
	for _, url := range r.c.urls {
		m, err := scrapeMetrics(ctx, url, mExpired)
		if err != nil {
			return "", err
		}
		counted += m[mExpired]
	}
	r.mu.Lock()
	lapsed := len(r.pays) + len(r.cancels) + len(r.lapses) - len(r.moved)
	r.mu.Unlock()
	r.ev.expiry.extra = counted - int64(lapsed)
	fmt.Fprintf(r.w, "the replicas counted %d order(s) expired, of %d that lapsed\n", counted, lapsed)
	return "", nil
}
