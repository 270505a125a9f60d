package lock

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
)

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
		p, exit := l.driveStep(q, &failures)
		if exit {
			return
		}
		if p == atOnce {
			continue
		}
		if p != untilKicked {
			timer.Reset(time.Duration(p))
		}
		select {
		case <-q.kick:
		case <-timer.C:
		case <-l.ctx.Done():
		}
		timer.Stop()
	}
}

// pause is how long the driver sleeps after a step: atOnce, untilKicked, or
// a positive duration (a kick still ends it early).
type pause time.Duration

const (
	atOnce      pause = -1 // take the next step without sleeping
	untilKicked pause = 0  // sleep until a kick: a grant, a release, a waiter
)

// driveStep does one thing for q and says how long to pause before the
// next, or that the driver is done.
func (l *Locker) driveStep(q *queue, failures *int) (p pause, exit bool) {
	l.mu.Lock()
	if l.closed {
		q.driving = false // Close withdraws the tickets
		l.mu.Unlock()
		return untilKicked, true
	}
	if len(q.waiters) == 0 && q.ticket != "" {
		q.withdrawTicket()
	}

	if len(q.withdrawing) > 0 {
		t := q.withdrawing[0]
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
		err := l.b.withdraw(ctx, q.k, t)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			q.lastErr = err
			*failures++
			return pause(l.backoff(*failures)), false
		}
		q.withdrawing = slices.DeleteFunc(q.withdrawing, func(s string) bool { return s == t })
		return atOnce, false
	}

	if len(q.waiters) == 0 {
		q.driving = false
		unsubscribe, mine := q.subscribed, q.subChans
		q.subscribed, q.listening, q.subChans = false, false, nil
		l.settle(q)
		l.mu.Unlock()
		if unsubscribe {
			// A new driver for q may start, and subscribe, before this
			// runs: it removes only this driver's entries.
			testEvent("unsubscribe", q.name)
			l.unsubscribe(q, mine)
			testEvent("unsubscribed", q.name)
		}
		return untilKicked, true
	}

	if !q.subscribed {
		// Listen before anything can queue us: a grant published before we
		// listen would wait for the re-check.
		q.subscribed = true
		l.mu.Unlock()
		l.subscribe(q)
		l.mu.Lock()
		q.listening = q.subscribed
		l.mu.Unlock()
		testEvent("subscribed", q.name)
		return atOnce, false
	}

	switch {
	case q.busy():
		// A goroutine of this process holds the lock (or is trying): its
		// release queues us and may hand the lock straight over (or, in
		// Redlock mode, wakes us).
		l.mu.Unlock()
		return untilKicked, false
	case q.pending != nil:
		l.mu.Unlock()
		return untilKicked, false // settle hands it over
	case !l.b.handsOver():
		l.mu.Unlock()
		return l.retry(q, failures), false
	case q.registered && time.Now().Before(q.checkAt):
		// Queued, and the re-check is not due: a grant will wake us.
		wait := time.Until(q.checkAt)
		l.mu.Unlock()
		return pause(wait), false
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
// pause before the next step.
func (l *Locker) afterAttempt(q *queue, ticket string, sent time.Time, res acquireResult, err error, failures int) pause {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q.ticket != ticket {
		return atOnce // a grant message got there first, or the ticket was dropped
	}
	if err != nil {
		// The call may have run, or may still run: never reuse a ticket
		// whose fate is unknown. Withdraw it and start over with a new one.
		q.lastErr = err
		q.withdrawTicket()
		return pause(l.backoff(failures))
	}
	switch res.status {
	case acquired:
		l.handOff(q, grant{ticket: ticket, token: res.token, deadline: res.deadline})
		l.settle(q)
		return untilKicked
	case placeLost, withdrawn:
		q.newTicket() // queue again at once, under a new ticket
		return atOnce
	}
	q.registered = true
	q.ticketSince = sent
	if q.checkAt.IsZero() {
		// A grant for the ticket came while the call was on its way, too
		// late in its claim lease to hand out: it asked for the re-check
		// at once, which takes the grant while it lasts.
		return atOnce
	}
	wait := l.recheckIn(res.retryIn)
	q.checkAt = time.Now().Add(wait)
	return pause(wait)
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
func (l *Locker) retry(q *queue, failures *int) pause {
	ticket := uuid.NewString()
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	res, err := l.b.acquire(ctx, q.k, ticket, modeNoQueue)
	cancel()
	l.mu.Lock()
	if err != nil {
		q.lastErr = err
		*failures++
		l.mu.Unlock()
		return pause(l.backoff(*failures))
	}
	*failures = 0
	if res.status != acquired {
		l.mu.Unlock()
		return pause(l.recheckIn(res.retryIn))
	}
	if l.closed {
		// Close began while we asked, and no Lock may start after it:
		// withdraw the ticket that won it. The next step sees the Locker closed.
		l.mu.Unlock()
		l.withdraw(context.Background(), q.k, ticket)
		return atOnce
	}
	l.handOff(q, grant{ticket: ticket, token: res.token, deadline: res.deadline})
	l.settle(q)
	l.mu.Unlock()
	return untilKicked
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
