package fair

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// releaseTimeout bounds the calls that run without a caller's context, or
// after it ended: releases, withdraws, the driver's calls.
const releaseTimeout = core.ReleaseTimeout

// drive contends in Redis for q's waiters, one step at a time, as
// queue.next says: it withdraws the tickets nobody wants, subscribes to
// the lock's grant channel, queues the process (or, for Redlock, tries
// again), and sleeps until a wake-up (a grant, a release, a waiter) or the
// re-check. It ends when nobody here waits, and with the Locker.
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

// driveStep takes the step queue.next names (nextStep), and says how long
// to pause before the next one, or that the driver is done.
func (l *Locker) driveStep(q *queue, failures *int) (p pause, done bool) {
	s := l.nextStep(q)
	switch s.a {
	case stop:
		if s.subscribed && !s.closed {
			// A new driver for q may start, and subscribe, before this
			// runs: it removes only this driver's entries.
			l.event("unsubscribe", q.name)
			l.unsubscribe(q, s.mine)
			l.event("unsubscribed", q.name)
		}
		return untilWoken, true

	case withdraw:
		ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
		err := l.backend.Withdraw(ctx, q.k, s.ticket)
		cancel()
		l.withdrawDone(q, s.ticket, err)
		if err != nil {
			*failures++
			return pause(l.backoff(*failures)), false
		}
		return atOnce, false

	case subscribe:
		// Listen before anything can queue us: a grant published before
		// we listen would wait for the re-check.
		l.subscribe(q)
		l.subscribed(q)
		l.event("subscribed", q.name)
		return atOnce, false

	case sleep:
		return s.wait, false
	}

	// register, refresh
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	res, err := l.backend.Contend(ctx, q.k, s.ticket, s.a == refresh)
	cancel()
	if err != nil {
		*failures++
	} else {
		*failures = 0
	}
	return l.contended(q, s.ticket, s.sent, res, err, *failures), false
}

// recheckIn is when a waiting process looks again by itself: right after
// the holder's remaining lease if that is shorter, else after
// RecheckInterval, jittered either way.
func (l *Locker) recheckIn(holderLease time.Duration) time.Duration {
	if holderLease > 0 && holderLease < l.cfg.RecheckInterval {
		return holderLease + time.Millisecond + rand.N(holderLease/4+time.Millisecond)
	}
	return l.jitter(l.cfg.RecheckInterval)
}

// jitter spreads d by ±25%.
func (l *Locker) jitter(d time.Duration) time.Duration { return lease.Jitter(d) }

// backoff is the wait after the n-th Redis error in a row: doubling from
// 5 ms, capped at RecheckInterval, jittered.
func (l *Locker) backoff(n int) time.Duration { return lease.Backoff(n, l.cfg.RecheckInterval) }
