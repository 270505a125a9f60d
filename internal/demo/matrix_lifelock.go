package demo

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// The lock design's reservation rows (-rows reservations): the sale of
// matrix_life.go on two replicas of the lock design sharing one Redis and
// one SQLite file, replica 1 in this process and replica 2 a process of
// its own (in this process too when the demo has no replica command; the
// kill and stop rows need one), with the faults of an order's expiry. The expiry is the one
// write of an order's life that every replica makes on its own, under the
// product's lock and fence (docs/reservations.md). Each fault is made
// certain and then proved from what the row reads, the replicas' /metrics,
// the victim process and the orders listed, or the row is "fault not
// injected":
//
//   - two replicas expiring at once: both expire every expireOften, and
//     every expiry pauses togetherPause in its critical section, so that
//     the other's comes while it holds the lock. Proof: each replica's own
//     seckill_orders_closed_total{state="expired"} grew while the lapsed
//     orders were expired, and a replica's lock acquisitions that found
//     the lock taken (seckill_lock_acquisitions_total{contended="true"})
//     grew then too, when only expiries take the lock.
//   - killed mid-expiry: replica 2 pauses in every expiry's critical
//     section (CHAOS_EXPIRY_PAUSE), is killed with SIGKILL once its
//     seckill_expiries_in_progress shows it there, and replica 1 must
//     expire the orders due then, once, after the lease the victim left.
//     Proof: the gauge, the orders due at the kill, and replica 1's own
//     count of the orders it expired after it.
//   - stopped past its lease mid-expiry: replica 2 is caught in the same
//     pause, stopped with SIGSTOP until replica 1 has expired the orders
//     due (it can only once the victim's lease ran out), then continued.
//     Proof: replica 1's count and the orders, and the victim's own
//     seckill_fence_rejections_total{stage="write"}: its late write
//     refused.
//   - a payment racing the expiry: only replica 2 expires, pausing
//     racePause in its critical section; once it is there, every lapsing
//     order is paid through replica 1, those whose window has ended and
//     those it has not. Proof: payments answered 409 order_expired and
//     200, all of them while that expiry was before its write: its
//     seckill_expiries_in_progress at least 1 before the first was sent
//     and after the last was answered, and its count of expired orders
//     unchanged between the two reads (an expiry counts its orders after
//     it wrote them).
//   - the controls: UNSAFE_EXPIRY=unlocked on replica 2 with new buyers
//     sent between its read and its write (proved as the payments are);
//     UNSAFE_EXPIRY=unchecked (proof: the replicas counted more orders
//     expired than lapsed); UNSAFE_PAY_LATE on replica 1 in the race
//     above (proof: payments sent after their window). Each must fail the
//     checks its broken step breaks (controlChecks), and no other.

// Settings of the lock design's reservation rows.
const (
	// lockLifeSpread paces wave 1: the lapsing orders come due over a
	// second, so that an expiry in progress leaves orders due after it,
	// and a race has orders on both sides of their window.
	lockLifeSpread = time.Second
	// expireOften is an expiring replica's interval; survivorEvery the
	// survivor's, slower, so that the victim is most often the first
	// into a critical section (should the survivor be, the victim takes
	// the orders that come due after).
	expireOften   = 10 * time.Millisecond
	survivorEvery = 100 * time.Millisecond
	// The expiry's pauses: two replicas at once; the stopped victim's,
	// which ends while it is stopped, so that it writes as soon as it is
	// continued (well inside the expiry's own 10 s bound); the race's,
	// far longer than its requests take to be answered.
	togetherPause = 100 * time.Millisecond
	stopPause     = 2 * time.Second
	racePause     = 1500 * time.Millisecond
	// raceBuyers is how many new buyers the unlocked control sends.
	raceBuyers = 5
)

// lockLifeRows are the lock design's reservation rows.
func lockLifeRows() []row {
	d := func(fault designFault, outcome designOutcome, label, why string) row {
		return row{mode: app.LockRedis, fault: label, label: "reservations", oversell: outcome != outcomeHolds, why: why,
			design: &designRow{design: app.DesignLock, fault: fault, outcome: outcome}}
	}
	return []row{
		d(faultExpireTogether, outcomeHolds, "two replicas expiring at once",
			"they took turns at the product's lock, and the second found the first's orders moved: every unit came back once"),
		d(faultExpiryKill, outcomeHolds, "replica killed mid-expiry",
			"the victim's transaction never ran; its lock ended with its lease, and the survivor expired its orders once"),
		d(faultExpiryStop, outcomeHolds, "replica stopped past its lease mid-expiry",
			"the survivor took the lapsed lock and expired the orders; the fence refused the woken victim's write"),
		d(faultPayRace, outcomeHolds, "payment racing the expiry",
			"the order's row let one move through: no payment after its window, no paid order expired"),
		d(faultUnlockedExpiry, outcomeCaught, "unsafe expiry unlocked",
			"the stock written back as the value read plus the units returned lost the purchases made in between"),
		d(faultUncheckedExpiry, outcomeCaught, "unsafe expiry unchecked",
			"paid orders expired, their units on sale again while counted sold"),
		d(faultPayLate, outcomeCaught, "unsafe pay late",
			"payments accepted after their window"),
	}
}

// lockLifeSetup is lifeSetup for the lock design: replica 1 in this
// process and replica 2, with their fault's settings, and the plan of
// the fault's steps (matrix_lifefaults.go).
func (r row) lockLifeSetup(o options, cfg app.Config) ([]replicaSpec, lifePlan, error) {
	a, v := cfg, cfg
	plan := lifePlan{spread: lockLifeSpread}
	switch f := r.design.fault; f {
	case faultExpireTogether:
		for _, c := range []*app.Config{&a, &v} {
			c.ExpireInterval, c.ChaosExpiryPause, c.ChaosProb = expireOften, togetherPause, 1
		}
		plan.lag = expiryLag(a)
		plan.lapse, plan.settled = countExpiries, expiredTogether
	case faultExpiryKill, faultExpiryStop:
		if o.command == nil {
			return nil, plan, errors.New("the kill and stop rows need replicas as processes of their own (no replica command)")
		}
		a.LockTTL, v.LockTTL = killTTL, killTTL
		a.ExpireInterval = survivorEvery
		v.ExpireInterval, v.ChaosExpiryPause, v.ChaosProb = expireOften, victimPause, 1
		plan.lag, plan.lapse = expiryLag(a)+killTTL, killMidExpiry
		if f == faultExpiryStop {
			v.ChaosExpiryPause = stopPause
			plan.lag, plan.lapse = expiryLag(v)+killTTL, stopMidExpiry
		}
	default: // the payment race and the controls: replica 2 alone expires
		a.ExpireInterval, v.ExpireInterval = time.Hour, expireOften
		v.ChaosExpiryPause, v.ChaosProb = racePause, 1
		plan.lapse = payRace
		switch f {
		case faultPayLate:
			a.UnsafePayLate = true
		case faultUnlockedExpiry:
			v.UnsafeExpiry, plan.lapse = "unlocked", buyRace
		case faultUncheckedExpiry:
			v.UnsafeExpiry, v.ChaosExpiryPause = "unchecked", 0
			plan.lapse, plan.settled = nil, countUnchecked
		}
		plan.lag = expiryLag(v)
	}
	return []replicaSpec{{cfg: a}, {cfg: v, command: o.command}}, plan, nil
}

// controlChecks are the checks a control must fail (must) and those it
// may fail besides (may), by what its broken step does: the unlocked
// expiry's write-back loses the purchases between its read and its
// write, their units counted on sale and reserved at once (2 and 5); the
// unchecked expiry moves paid orders (8), whose units go on sale again
// while counted sold (3, 4), and cancelled or expired ones again, each
// returning a unit (5); a late payment is accepted after its window (9),
// and of an order already expired counts its unit sold while on sale
// (2, 5).
func controlChecks(f designFault) (must, may []int) {
	switch f {
	case faultUnlockedExpiry:
		return []int{2, 5}, nil
	case faultUncheckedExpiry:
		return []int{8}, []int{3, 4, 5}
	case faultPayLate:
		return []int{9}, []int{2, 5}
	}
	return nil, nil
}

// lockLifeVerdict is lifeVerdict for the lock design's rows. A row that
// must hold is a mismatch on any failed check, whatever its evidence (a
// failure needs no fault to count); otherwise it needs its fault's
// evidence. A control needs its evidence to be judged: then its checks
// must fail, the ones its control breaks and no other.
func (r *result) lockLifeVerdict(failed []int, facts string) (v, detail string) {
	x, f := r.dev.expiry, r.design.fault
	facts += "; " + x.text(f)
	missing := r.dev.missing
	if missing == "" {
		missing = x.missing(f)
	}
	if r.design.outcome != outcomeCaught {
		switch {
		case len(failed) > 0:
			return "mismatch", facts
		case missing != "":
			return "fault not injected", missing + " (" + facts + ")"
		case len(r.dev.life.checks) == 0:
			return "mismatch", "no checks ran (" + facts + ")"
		case f == faultExpiryKill && (x.takenOver != x.due || x.survivorExpired < int64(x.due)):
			return "mismatch", "the survivor did not expire every order due at the kill after it (" + facts + ")"
		}
		return "ok", facts
	}
	must, may := controlChecks(f)
	facts += "; must fail " + checkNames(r.dev.life.checks, must)
	switch {
	case missing != "" && len(failed) > 0:
		return "mismatch", "its checks failed without its fault: " + missing + " (" + facts + ")"
	case missing != "":
		return "fault not injected", missing + " (" + facts + ")"
	case len(failed) == 0:
		return "not caught", facts
	}
	for _, n := range failed {
		if !slices.Contains(must, n) && !slices.Contains(may, n) {
			return "mismatch", facts
		}
	}
	for _, n := range must {
		if !slices.Contains(failed, n) {
			return "mismatch", facts
		}
	}
	return "ok", facts
}

// checkNames names the checks numbered ns, as "2 (available + ...)".
func checkNames(checks []loadtest.Invariant, ns []int) string {
	var out []string
	for _, n := range ns {
		name := ""
		for _, c := range checks {
			if c.Number == n {
				name = " (" + c.Name + ")"
			}
		}
		out = append(out, fmt.Sprint(n)+name)
	}
	return strings.Join(out, ", ")
}

// expiryEvidence is what a lock design reservation row saw of its fault.
type expiryEvidence struct {
	// expired and contended are, per replica, the orders it counted
	// expired and its lock acquisitions that found the lock taken,
	// while the lapsed orders were expired (two replicas at once).
	expired, contended [2]int64
	// held and locks are the victim's expiries in progress and locks
	// held when it was killed or stopped; due the orders pending and due
	// then; takenOver those of them the survivor expired after, and
	// survivorExpired the survivor's own count of orders it expired
	// since; stopped how long the victim was stopped.
	held, locks     int64
	due, takenOver  int
	survivorExpired int64
	stopped         time.Duration
	// refused and leasesLost are the woken victim's writes refused by the
	// fence and its leases lost.
	refused, leasesLost int64
	// The race: requests sent while replica 2's expiry was in its
	// critical section, those sent after their order's window, those
	// answered 2xx and those answered 409 order_expired; inRound, whether
	// that expiry was still before its write when the last was answered.
	sent, sentLate, accepted, refusedLate int
	inRound                               bool
	// extra is how many more orders the replicas counted expired than
	// lapsed (the unchecked expiry).
	extra int64
}

// missing says what evidence of f the sale lacks, "" when it has it all.
func (x expiryEvidence) missing(f designFault) string {
	switch f {
	case faultExpireTogether:
		if x.expired[0] < 1 || x.expired[1] < 1 {
			return "not both replicas expired orders"
		}
		if x.contended[0]+x.contended[1] < 1 {
			return "neither replica found the product's lock held by the other: they did not expire at once"
		}
	case faultExpiryKill:
		if x.held < 1 || x.due < 1 {
			return "the victim was not killed in an expiry's critical section with orders due"
		}
	case faultExpiryStop:
		switch {
		case x.held < 1 || x.due < 1:
			return "the victim was not stopped in an expiry's critical section with orders due"
		case x.takenOver < x.due || x.survivorExpired < int64(x.due):
			return "the survivor did not expire the orders due while the victim was stopped"
		case x.refused < 1:
			return "the fence refused no write of the woken victim"
		}
	case faultPayRace:
		switch {
		case !x.inRound:
			return "the payments were not all answered while replica 2's expiry was before its write"
		case x.refusedLate < 1 || x.accepted < 1:
			return "the payments did not fall on both sides of their window"
		}
	case faultUnlockedExpiry:
		if !x.inRound || x.accepted < 1 {
			return "no purchase was answered while the unlocked expiry was between its read and its write"
		}
	case faultPayLate:
		if x.sentLate < 1 {
			return "no payment was sent after its window"
		}
	case faultUncheckedExpiry:
		if x.extra < 1 {
			return "the replicas counted no more orders expired than lapsed"
		}
	}
	return ""
}

// text is the evidence of f, in words.
func (x expiryEvidence) text(f designFault) string {
	switch f {
	case faultExpireTogether:
		return fmt.Sprintf("orders expired by replica 1: %d, by replica 2: %d; acquisitions that found the lock held by the other: %d and %d",
			x.expired[0], x.expired[1], x.contended[0], x.contended[1])
	case faultExpiryKill:
		return fmt.Sprintf("the victim killed with %d expiry(ies) in progress, %d lock(s) held, %d order(s) due; the survivor expired %d of them after the kill (its own count: %d)",
			x.held, x.locks, x.due, x.takenOver, x.survivorExpired)
	case faultExpiryStop:
		return fmt.Sprintf("the victim stopped %v with %d expiry(ies) in progress, %d lock(s) held, %d order(s) due; the survivor expired %d of them meanwhile (its own count: %d); woken, the victim's writes refused by the fence: %d, leases lost: %d",
			x.stopped.Round(time.Millisecond), x.held, x.locks, x.due, x.takenOver, x.survivorExpired, x.refused, x.leasesLost)
	case faultPayRace, faultPayLate:
		return fmt.Sprintf("%d payment(s) sent while replica 2's expiry was in its critical section, %d after their window: %d answered 200, %d 409 order_expired; that expiry still before its write at the last answer: %v",
			x.sent, x.sentLate, x.accepted, x.refusedLate, x.inRound)
	case faultUnlockedExpiry:
		return fmt.Sprintf("%d purchase(s) sent while replica 2's unlocked expiry was between its read and its write, %d answered 201; still before its write at the last answer: %v",
			x.sent, x.accepted, x.inRound)
	case faultUncheckedExpiry:
		return fmt.Sprintf("the replicas counted %d order(s) expired beyond those that lapsed", x.extra)
	}
	return ""
}

// lockLife reports whether r is one of lockLifeRows.
func (r row) lockLife() bool {
	return r.design != nil && r.design.design == app.DesignLock && r.design.fault.life()
}

// writeLockLifeLegend explains the lock design's reservation rows, when
// there are any.
func writeLockLifeLegend(w io.Writer, results []*result) {
	if !slices.ContainsFunc(results, func(r *result) bool { return r.lockLife() }) {
		return
	}
	fmt.Fprintf(w, "reservations (redis): the reservation sale on the lock design, wave 1 paced over %v; replica 2 a process of its own.\n"+
		"two replicas expiring at once: both every %v, each expiry pausing %v holding the lock. killed, stopped: replica 2\n"+
		"pauses in its expiry's critical section and is killed (SIGKILL), or stopped (SIGSTOP) until replica 1 has expired the\n"+
		"orders due, then continued; lease %v. payment racing the expiry: replica 2 alone expires, pausing %v, and the lapsing\n"+
		"orders are paid through replica 1 meanwhile. unsafe ...: the controls, caught only when the checks they break fail.\n"+
		"checks: 1-6 as above, 7 nothing pending past its window + the lag, 8 every payment answered 200 paid, 9 none after\n"+
		"its window (matrix_life.go).\n",
		lockLifeSpread, expireOften, togetherPause, killTTL, racePause)
}
