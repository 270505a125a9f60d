package lock

import (
	"context"
	"math/rand/v2"
	"time"
)

// drive contends in Redis for q's waiters, one step at a time, as q.next
// says: it withdraws the tickets nobody wants, subscribes to the lock's
// grant channel, queues the process (or, for Redlock, tries again), and
// sleeps until a wake-up (a grant, a release, a waiter) or the re-check.
// It ends when nobody here waits, and with the Locker.
func (l *Locker) drive(q *queue) {
	defer l.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	failures := 0
	for {
		p, done := l.driveStep(q, &failures)
		if done {
			return
		}
		if p == atOnce {
			continue
		}
		if p != untilWoken {
			timer.Reset(time.Duration(p))
		}
		select {
		case <-q.wakeup:
		case <-timer.C:
		case <-l.ctx.Done():
		}
		timer.Stop()
	}
}

// pause is how long the driver sleeps after a step: atOnce, untilWoken, or
// a positive duration (a wake-up still ends it early).
type pause time.Duration

const (
	atOnce     pause = -1 // take the next step without sleeping
	untilWoken pause = 0  // sleep until woken: a grant, a release, a waiter
)

// driveStep takes the step q.next names, and says how long to pause
// before the next one, or that the driver is done.
func (l *Locker) driveStep(q *queue, failures *int) (p pause, done bool) {
	l.mu.Lock()
	if l.closed {
		q.driver = stopped // Close withdraws the tickets
		l.mu.Unlock()
		return untilWoken, true
	}
	a := q.next()
	switch a {
	case stop:
		subscribed, mine := q.driver != starting, q.subChans
		q.driver, q.subChans = stopped, nil
		l.tend(q)
		l.mu.Unlock()
		if subscribed {
			// A new driver for q may start, and subscribe, before this
			// runs: it removes only this driver's entries.
			hooks.event("unsubscribe", q.name)
			l.unsubscribe(q, mine)
			hooks.event("unsubscribed", q.name)
		}
		return untilWoken, true

	case withdraw:
		t := q.withdrawing[0]
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
		err := l.backend.withdraw(ctx, q.k, t)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			q.lastErr = err
			*failures++
			return pause(l.backoff(*failures)), false
		}
		q.withdrawn(t)
		return atOnce, false

	case subscribe:
		// Listen before anything can queue us: a grant published before
		// we listen would wait for the re-check.
		q.driver = subscribing
		l.mu.Unlock()
		l.subscribe(q)
		l.mu.Lock()
		if q.driver == subscribing {
			q.driver = listening
		}
		l.mu.Unlock()
		hooks.event("subscribed", q.name)
		return atOnce, false

	case sleep:
		wait := untilWoken
		if q.state == queued {
			wait = max(pause(time.Until(q.checkAt)), atOnce)
		}
		l.mu.Unlock()
		return wait, false
	}

	// register, refresh
	ticket := q.sending(a)
	sent := time.Now()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	res, err := l.backend.contend(ctx, q.k, ticket, a == refresh)
	cancel()
	if err != nil {
		*failures++
	} else {
		*failures = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p = q.attempted(ticket, sent, res, err, *failures)
	l.tend(q)
	return p, false
}

// wake ends the driver's sleep, or its next one.
func (q *queue) wake() {
	select {
	case q.wakeup <- struct{}{}:
	default:
	}
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
