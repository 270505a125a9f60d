package lock

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
)

// queue is this process's state for one lock name. Goroutines that want a
// lock another goroutine of this process holds or awaits wait here in FIFO
// order instead of polling Redis; one driver goroutine contends in Redis for
// all of them. In Redis, the process is one entry in the lock's queue, under
// a ticket: a fresh UUID that becomes the owner value of the acquisition it
// wins. Every field is guarded by Locker.mu.
type queue struct {
	name string
	k    keys

	waiters    []*waiter // oldest first
	holder     *Lock     // the Lock of this process that holds it, if any
	attempting bool      // a first, direct attempt is in flight

	// ticket is the UUID this process is (or is about to be) queued under in
	// Redis, "" when it is not. A grant for any other ticket is stale.
	ticket string
	// ticketSince is a time no later than any grant to ticket can have
	// happened: the ticket's creation, then the send time of each call that
	// found it still waiting. A grant's lease is known to last until
	// ticketSince + TTL.
	ticketSince time.Time
	// registered: ticket has been queued by a call that returned, so the
	// next call refreshes it rather than registering it anew.
	registered bool
	// checkAt is when the driver next asks Redis itself (the fallback
	// re-check), if no grant has come by then. The zero time asks for the
	// re-check at once: handOff sets it for a grant it cannot hand out. A
	// call that queues or refreshes the ticket sets it to its send time
	// first, so that a zero found when its reply comes was set meanwhile,
	// and the reply keeps it.
	checkAt time.Time
	// pending is a grant to ticket that came when no goroutine waited: the
	// next one to arrive takes it, or the driver withdraws it.
	pending *grant
	// withdraw lists tickets being given up: nobody here wants them any
	// more, or a call carrying one failed and its fate is unknown. None is
	// q.ticket, so a grant for one that arrives meanwhile is stale; the
	// withdraw passes such a grant on.
	withdraw []string

	driving    bool          // the driver goroutine runs
	kick       chan struct{} // wakes the driver; capacity 1, made with the driver
	subscribed bool          // the channel is in the Locker's subscription
	// subChans are the subscription entries the current driver added; its
	// unsubscribe removes these and no others (a later driver's may stand
	// in their place by then).
	subChans []*subChannel
	lastErr  error // the driver's last Redis error, for the waiters' error
}

type waiter struct {
	ch chan *Lock // capacity 1: receives the lock when it is handed over
}

// grant is a lock won for a ticket of this process, not yet handed out.
type grant struct {
	ticket   string
	token    int64
	deadline time.Time // the lease lasts at least until then
	// claim: the lease is a grant's claim lease, shorter than the TTL; the
	// Lock extends it at once (common.lua's grant_lease says why).
	claim bool
}

func (l *Locker) newQueue(name string) *queue {
	q := &queue{name: name, k: newKeys(l.opts.Prefix, name)}
	l.queues[name] = q
	return q
}

func (q *queue) busy() bool { return q.holder != nil || q.attempting }

func (q *queue) add(w *waiter, front bool) {
	if front {
		q.waiters = slices.Insert(q.waiters, 0, w)
		return
	}
	q.waiters = append(q.waiters, w)
}

func (q *queue) remove(w *waiter) bool {
	i := slices.Index(q.waiters, w)
	if i < 0 {
		return false
	}
	q.waiters = slices.Delete(q.waiters, i, i+1)
	return true
}

func (q *queue) poke() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// newTicket starts a new registration. Caller holds Locker.mu.
func (q *queue) newTicket() string {
	q.ticket = uuid.NewString()
	q.ticketSince = time.Now()
	q.registered = false
	q.pending = nil
	return q.ticket
}

// dropTicket moves the current ticket to withdrawing, for the driver to
// give up. Caller holds Locker.mu.
func (q *queue) dropTicket() {
	if q.ticket != "" {
		q.withdraw = append(q.withdraw, q.ticket)
	}
	q.ticket, q.registered, q.pending = "", false, nil
}

// settle is called under Locker.mu after any change to q: it gives a
// pending grant to a goroutine that arrived, starts or wakes the driver
// while it has work, and forgets q when nothing is left.
func (l *Locker) settle(q *queue) {
	if p := q.pending; p != nil && len(q.waiters) > 0 {
		l.handOff(q, *p)
	}
	if len(q.waiters) > 0 || q.ticket != "" || len(q.withdraw) > 0 {
		if !q.driving && !l.closed {
			q.driving = true
			if q.kick == nil {
				q.kick = make(chan struct{}, 1)
			}
			l.wg.Add(1)
			go l.drive(q)
		}
	}
	if q.driving {
		q.poke() // also when nothing is left: the driver exits
		return
	}
	if !q.busy() && len(q.waiters) == 0 && l.queues[q.name] == q {
		delete(l.queues, q.name)
	}
}

// handOff gives a lock won for g.ticket, q's current ticket, to the oldest
// local waiter; with none, it keeps the grant pending. Caller holds
// Locker.mu, has checked that the Locker is not closed, and calls settle
// afterwards.
func (l *Locker) handOff(q *queue, g grant) {
	if g.claim && time.Until(g.deadline) < l.opts.claimLease()/2 {
		// Too little of the claim lease is left to count on the extension
		// landing in time (the process was paused, or the grant waited
		// for a goroutine). The driver's re-check takes the grant instead:
		// the acquire script extends it to the full lease if it is still
		// ours, and finds our place gone otherwise.
		q.ticket, q.pending = g.ticket, nil
		q.checkAt = time.Time{}
		return
	}
	if len(q.waiters) == 0 {
		// Kept on q.ticket, so that the driver withdraws it if nobody comes.
		q.ticket = g.ticket
		q.pending = &g
		return
	}
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	q.ticket, q.registered, q.pending = "", false, nil
	lk := l.newLock(q, g)
	q.holder = lk
	w.ch <- lk
}

// deliverGrant handles a grant message from the subscription. The grant
// came with a claim lease, which started after the last call that found
// the ticket still waiting was sent.
func (l *Locker) deliverGrant(q *queue, ticket string, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q.ticket != ticket || ticket == "" || q.pending != nil || l.closed {
		return // stale: taken through a reply, or given up
	}
	l.handOff(q, grant{ticket: ticket, token: token, deadline: q.ticketSince.Add(l.opts.claimLease()), claim: true})
	l.settle(q)
}

// drive contends in Redis for q's waiters. It queues the process under a
// ticket, then sleeps until a grant arrives (handled by the subscription or
// by a release in this process, not here), a kick, or the fallback
// re-check: the holder's remaining lease or RecheckInterval, whichever is
// shorter, jittered. Each re-check also refreshes the process's place, so
// a crashed process drops out of the queue within five intervals. A ticket
// nobody wants any more is withdrawn before anything else.
func (l *Locker) drive(q *queue) {
	defer l.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	failures := 0
	for {
		wait, exit := l.driveStep(q, &failures)
		if exit {
			return
		}
		if wait < 0 {
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-q.kick:
		case <-timer.C:
		case <-l.ctx.Done():
		}
		timer.Stop()
	}
}

// driveStep does one thing for q and says how long to sleep before the
// next (0: until kicked; -1: at once), or that the driver is done.
func (l *Locker) driveStep(q *queue, failures *int) (wait time.Duration, exit bool) {
	l.mu.Lock()
	if l.closed {
		q.driving = false // Close withdraws the tickets
		l.mu.Unlock()
		return 0, true
	}
	if len(q.waiters) == 0 && q.ticket != "" {
		q.dropTicket()
	}

	if len(q.withdraw) > 0 {
		t := q.withdraw[0]
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
		err := l.b.withdraw(ctx, q.k, t)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			q.lastErr = err
			*failures++
			return l.backoff(*failures), false
		}
		q.withdraw = slices.DeleteFunc(q.withdraw, func(s string) bool { return s == t })
		return -1, false
	}

	if len(q.waiters) == 0 {
		q.driving = false
		unsubscribe, mine := q.subscribed, q.subChans
		q.subscribed, q.subChans = false, nil
		l.settle(q)
		l.mu.Unlock()
		if unsubscribe {
			// A new driver for q may start, and subscribe, before this
			// runs: it removes only this driver's entries.
			testEvent("unsubscribe", q.name)
			l.unsubscribe(q, mine)
			testEvent("unsubscribed", q.name)
		}
		return 0, true
	}

	if !q.subscribed {
		// Listen before anything can queue us: a grant published before we
		// listen would wait for the re-check.
		q.subscribed = true
		l.mu.Unlock()
		l.subscribe(q)
		testEvent("subscribed", q.name)
		return -1, false
	}

	switch {
	case q.busy():
		// A goroutine of this process holds the lock (or is trying): its
		// release queues us and may hand the lock straight over (or, in
		// Redlock mode, wakes us).
		l.mu.Unlock()
		return 0, false
	case q.pending != nil:
		l.mu.Unlock()
		return 0, false // settle hands it over
	case !l.b.handsOver():
		l.mu.Unlock()
		return l.retry(q, failures), false
	case q.registered && time.Now().Before(q.checkAt):
		// Queued, and the re-check is not due: a grant will wake us.
		wait := time.Until(q.checkAt)
		l.mu.Unlock()
		return wait, false
	}

	if q.ticket == "" {
		q.newTicket()
	}
	ticket, mode := q.ticket, modeRegister
	if q.registered {
		mode = modeRefresh
	}
	sent := time.Now()
	q.checkAt = sent
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	res, err := l.b.acquire(ctx, q.k, ticket, mode)
	cancel()
	if err != nil {
		*failures++
	} else {
		*failures = 0
	}
	return l.afterAttempt(q, ticket, sent, res, err, *failures), false
}

// afterAttempt applies the driver's acquire reply and returns how long to
// sleep before the next step.
func (l *Locker) afterAttempt(q *queue, ticket string, sent time.Time, res acquireResult, err error, failures int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q.ticket != ticket {
		return -1 // a grant message got there first, or the ticket was dropped
	}
	if err != nil {
		// The call may have run, or may still run: never reuse a ticket
		// whose fate is unknown. Give it up and start over with a new one.
		q.lastErr = err
		q.dropTicket()
		return l.backoff(failures)
	}
	switch res.status {
	case acquired:
		l.handOff(q, grant{ticket: ticket, token: res.token, deadline: res.deadline})
		l.settle(q)
		return 0
	case placeLost, voided:
		q.newTicket() // queue again at once, under a new ticket
		return -1
	}
	q.registered = true
	q.ticketSince = sent
	if q.checkAt.IsZero() {
		// A grant for the ticket came while the call was on its way, too
		// late in its claim lease to hand out: it asked for the re-check
		// at once, which takes the grant while it lasts.
		return -1
	}
	wait := l.recheckIn(res.retryIn)
	q.checkAt = time.Now().Add(wait)
	return wait
}

// recheckIn is when a waiting process looks again by itself: right after
// the holder's remaining lease if that is shorter, else after
// RecheckInterval, jittered either way.
func (l *Locker) recheckIn(holderLease time.Duration) time.Duration {
	if holderLease > 0 && holderLease < l.opts.RecheckInterval {
		return holderLease + time.Millisecond + rand.N(holderLease/4+time.Millisecond)
	}
	return l.jitter(l.opts.RecheckInterval)
}

// retry is the driver's step for a backend that does not hand over
// (Redlock): try with a fresh ticket, and on failure sleep until a release
// wakes us or the re-check is due. The backend has already undone a failed
// attempt on every node.
func (l *Locker) retry(q *queue, failures *int) time.Duration {
	ticket := uuid.NewString()
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	res, err := l.b.acquire(ctx, q.k, ticket, modeNoQueue)
	cancel()
	l.mu.Lock()
	if err != nil {
		q.lastErr = err
		*failures++
		l.mu.Unlock()
		return l.backoff(*failures)
	}
	*failures = 0
	if res.status != acquired {
		l.mu.Unlock()
		return l.recheckIn(res.retryIn)
	}
	if l.closed {
		// Close began while we asked, and no Lock may start after it:
		// give the lock up. The next step sees the Locker closed.
		l.mu.Unlock()
		l.cleanup(context.Background(), q.k, ticket)
		return -1
	}
	l.handOff(q, grant{ticket: ticket, token: res.token, deadline: res.deadline})
	l.settle(q)
	l.mu.Unlock()
	return 0
}

// release runs the release script for lk. When other goroutines of this
// process wait for the lock, the same script queues the process under a new
// ticket, and if the process is first in line the lock comes straight back:
// the oldest local waiter then holds it after one round trip.
func (l *Locker) release(ctx context.Context, lk *Lock) (released bool, err error) {
	l.mu.Lock()
	q := l.queues[lk.name]
	requeue := ""
	if q != nil && q.holder == lk && len(q.waiters) > 0 && q.ticket == "" && !l.closed && l.b.handsOver() {
		requeue = q.newTicket()
		q.checkAt = q.ticketSince // the release queues it (see checkAt)
	}
	l.mu.Unlock()

	sent := time.Now()
	res, err := l.b.release(ctx, lk.k, lk.owner, requeue)

	if err == nil && res.requeueLost && !res.released && time.Now().Before(lk.Deadline()) && !testNoReleaseInference {
		// The first call's reply was lost and the second found the lock gone
		// or someone else's. The key lives at least until the Lock's
		// deadline, and only this Lock's owner can delete it before then:
		// the second call ran before the deadline (its reply came back
		// earlier), so the first call released it. (A Redis that lost the
		// key meanwhile, in a restart or a failover, looks the same: the
		// release cannot tell, and reports it released.)
		res.released = true
	}

	l.mu.Lock()
	giveUp := ""
	if err == nil && res.granted && l.closed {
		// Close began while we released, and the lock came back to this
		// process: nobody here may take it any more. Pass it on.
		giveUp = res.ticket
	}
	if q != nil && l.queues[lk.name] == q {
		if q.holder == lk {
			q.holder = nil
		}
		if (err != nil || res.requeueLost) && requeue != "" && q.ticket == requeue {
			q.dropTicket() // it may or may not be queued: give it up
		}
		switch {
		case giveUp != "" || err != nil:
		case res.granted && res.ticket == q.ticket:
			l.handOff(q, grant{ticket: res.ticket, token: res.token, deadline: res.deadline})
		case res.granted:
			// Granted to a ticket of ours that is no longer wanted: pass it on.
			q.withdraw = append(q.withdraw, res.ticket)
		case requeue != "" && q.ticket == requeue:
			q.registered = true
			q.ticketSince = sent
			if !q.checkAt.IsZero() { // else a grant asked for the re-check at once
				q.checkAt = time.Now().Add(l.jitter(l.opts.RecheckInterval))
			}
		}
		l.settle(q)
	}
	l.mu.Unlock()
	if giveUp != "" {
		l.cleanup(ctx, lk.k, giveUp)
	}
	return res.released, err
}

// testNoReleaseInference lets a test report only what a release's second
// call saw, to show the failure the inference from the deadline prevents.
var testNoReleaseInference = false

// leaseEnded is told by a Lock that lost its lease: it no longer keeps this
// process's other waiters from contending.
func (l *Locker) leaseEnded(lk *Lock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.queues[lk.name]; q != nil && q.holder == lk {
		q.holder = nil
		l.settle(q)
	}
}

// jitter spreads d by ±25%.
func (l *Locker) jitter(d time.Duration) time.Duration {
	return d - d/4 + rand.N(d/2+1)
}

// backoff is the wait after the n-th Redis error in a row: doubling from 5 ms,
// capped at RecheckInterval, jittered.
func (l *Locker) backoff(n int) time.Duration {
	d := 5 * time.Millisecond << min(max(n-1, 0), 10)
	return l.jitter(min(d, l.opts.RecheckInterval))
}
