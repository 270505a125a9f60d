package handoff

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/backend"
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
	"github.com/seckill-ref/seckill/lock/internal/subscription"
)

// The driver gets the lock from Redis for a line's waiting goroutines, one
// step at a time, as nextStep says: it withdraws the tickets nobody wants,
// listens on the lock's channel, puts the process in the lock's line (or,
// on Redlock, tries again), and sleeps until a wake-up (a grant, a release,
// a waiter) or the re-check. It ends when nobody here waits, and with the
// Locker.

// action is what the driver does next.
type action int

const (
	stop      action = iota // nothing left to do: stop listening and end
	sleep                   // wait for a wake-up, or until the re-check (checkAt)
	withdraw                // withdraw withdrawing[0]
	subscribe               // listen on the lock's channel
	join                    // put the process in line under a new ticket
	refresh                 // refresh its place under ticket: the re-check
)

// pause is how long the driver sleeps after a step: atOnce, untilWoken, or
// a positive duration (a wake-up still ends it early).
type pause time.Duration

const (
	atOnce     pause = -1 // take the next step without sleeping
	untilWoken pause = 0  // sleep until woken: a grant, a release, a waiter
)

// drive is the driver's goroutine. ctx ends at Close; subs carry the
// lock's messages; event tells a test of the steps it orders others around.
func (ln *line) drive(ctx context.Context, subs []*subscription.Subscriber, event func(string, string)) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var listeners []*subscription.Listener
	failures := 0
	for {
		a, ticket, sent, nap := ln.nextStep()
		var p pause
		switch a {
		case stop:
			// A new driver may start, and listen, before this runs: each
			// stops only its own listeners.
			if listeners != nil && ctx.Err() == nil {
				event("unsubscribe", ln.k.Name)
			}
			for _, l := range listeners {
				l.Stop()
			}
			if listeners != nil && ctx.Err() == nil {
				event("unsubscribed", ln.k.Name)
			}
			return
		case withdraw:
			wctx, cancel := context.WithTimeout(ctx, core.ReleaseTimeout)
			err := ln.sh.backend.Withdraw(wctx, []queue.Keys{ln.k}, []string{ticket})[0]
			cancel()
			ln.withdrawn(ticket, err)
			p = atOnce
			if err != nil {
				failures++
				p = pause(lease.Backoff(failures, ln.sh.cfg.RecheckInterval))
			}
		case subscribe:
			// Listen before anything can put the process in line: a grant
			// published before it listens would wait for the re-check.
			listeners = ln.listen(ctx, subs)
			ln.listened()
			event("subscribed", ln.k.Name)
			p = atOnce
		case sleep:
			p = nap
		case join, refresh:
			wctx, cancel := context.WithTimeout(ctx, core.ReleaseTimeout)
			t, err := ln.sh.backend.Wait(wctx, ln.k, ticket, a == refresh)
			cancel()
			if err != nil {
				failures++
			} else {
				failures = 0
			}
			p = ln.waited(ticket, sent, t, err, failures)
		}
		if p == atOnce {
			continue
		}
		if p != untilWoken {
			timer.Reset(time.Duration(p))
		}
		select {
		case <-ln.wakeup:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// listen adds a listener of the lock's channel on each subscription, and
// waits, at most one re-check interval, until the servers have confirmed
// them: a grant published before that would be missed, and made up for
// only by the re-check. A server that never answers (a partitioned Redlock
// node) holds up neither the others nor the wait beyond that.
func (ln *line) listen(ctx context.Context, subs []*subscription.Subscriber) []*subscription.Listener {
	listeners := make([]*subscription.Listener, len(subs))
	for i, s := range subs {
		listeners[i] = s.Listen(ln.k.Channel, ln.message)
	}
	t := time.NewTimer(ln.sh.cfg.RecheckInterval)
	defer t.Stop()
	for _, l := range listeners {
		select {
		case <-l.Ready():
		case <-t.C:
			return listeners
		case <-ctx.Done():
			return listeners
		}
	}
	return listeners
}

// ---- The driver's events ----

// nextStep: the driver asks what to do now (a), and takes the step's
// first part: the ticket to withdraw, join or refresh under, the call's
// send time, and how long to sleep. It gives up a ticket nobody waits for
// before anything else.
func (ln *line) nextStep() (a action, ticket string, sent time.Time, nap pause) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.sh.closed.Load() {
		ln.driver = stopped // Close withdraws the tickets
		return stop, "", sent, nap
	}
	if len(ln.waiters) == 0 && ln.ticket != "" && ln.state != joining {
		// Nobody waits any more (their waits ended). A release under way
		// then finds the ticket given up, and passes on a grant to it.
		if ln.state == releasing {
			ln.withdrawing = append(ln.withdrawing, ln.ticket)
			ln.ticket = ""
		} else {
			ln.dropTicket()
		}
	}
	now := time.Now()
	switch {
	case len(ln.withdrawing) > 0:
		return withdraw, ln.withdrawing[0], sent, nap
	case len(ln.waiters) == 0:
		ln.driver = stopped
		ln.tend()
		return stop, "", sent, nap
	case ln.driver == starting:
		ln.driver = subscribing
		return subscribe, "", sent, nap
	case ln.state == free:
		ln.newTicket()
		ln.state = joining
		return join, ln.ticket, now, nap
	case ln.state == queued && !now.Before(ln.checkAt):
		ln.state = joining
		return refresh, ln.ticket, now, nap
	case ln.state == queued:
		return sleep, "", sent, max(pause(ln.checkAt.Sub(now)), atOnce)
	}
	// trying, held, releasing: a release wakes the driver (and may hand the
	// lock straight to a waiter); queued: a grant message or the re-check;
	// joining: the reply.
	return sleep, "", sent, untilWoken
}

// listened: the driver's listeners are in place (or some were given up
// on; the re-check makes up for them).
func (ln *line) listened() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.driver == subscribing {
		ln.driver = listening
	}
}

// withdrawn: the driver's withdraw of ticket came back with err.
func (ln *line) withdrawn(ticket string, err error) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if err != nil {
		ln.lastErr = err
		return
	}
	ln.withdrawing = slices.DeleteFunc(ln.withdrawing, func(t string) bool { return t == ticket })
}

// waited: the driver's call for ticket, sent at sent, came back; failures
// counts the calls that failed in a row. It returns how long the driver
// pauses.
func (ln *line) waited(ticket string, sent time.Time, t backend.Turn, err error, failures int) pause {
	ln.mu.Lock()
	p, d := ln.answer(ticket, sent, t, err, failures)
	ln.tend()
	ln.mu.Unlock()
	d.deliver()
	return p
}

// answer is waited's transition, under ln.mu.
func (ln *line) answer(ticket string, sent time.Time, t backend.Turn, err error, failures int) (pause, handOff) {
	cfg := ln.sh.cfg
	if ln.state != joining || ln.ticket != ticket {
		return atOnce, handOff{} // a grant message got there first, or the ticket was given up
	}
	switch {
	case err != nil:
		// The call may have run, or may still run: never reuse a ticket
		// whose fate is unknown. Withdraw it and start over with a new one.
		ln.lastErr = err
		ln.dropTicket()
		return pause(lease.Backoff(failures, cfg.RecheckInterval)), handOff{}
	case t.Status == queue.Taken:
		return untilWoken, ln.pass(grant{ticket: t.Owner, token: t.Token, deadline: t.Deadline})
	case t.Status == queue.PlaceLost, t.Status == queue.Withdrawn:
		ln.ticket, ln.state = "", free // join again at once, under a new ticket
		return atOnce, handOff{}
	case t.NoLine:
		// Held, and the backend keeps no place for the process (Redlock):
		// try again after the holder's remaining lease, or when woken.
		ln.ticket, ln.state = "", free
		return pause(recheckIn(cfg.RecheckInterval, t.HeldFor)), handOff{}
	}
	ln.state, ln.since = queued, sent
	if ln.recheckNow {
		// A grant for the ticket came while the call was on its way, too
		// late in its claim to hand out: the re-check takes it while it
		// lasts.
		ln.recheckNow = false
		ln.checkAt = time.Now()
		return atOnce, handOff{}
	}
	wait := recheckIn(cfg.RecheckInterval, t.HeldFor)
	ln.checkAt = time.Now().Add(wait)
	return pause(wait), handOff{}
}

// message: a message on the lock's channel: a grant, for this process or
// another ("<pid> <ticket> <token> <last>"), or, on Redlock, a wake-up
// after a release.
func (ln *line) message(payload string) {
	if payload == "wake" {
		ln.mu.Lock()
		if ln.state == queued {
			ln.checkAt = time.Now() // try again now
		}
		if ln.driver != stopped {
			ln.wake()
		}
		ln.mu.Unlock()
		return
	}
	// Every waiting process sees every grant on the channel; only the
	// addressee parses it.
	if !strings.HasPrefix(payload, ln.sh.id+" ") {
		return
	}
	_, ticket, token, last, ok := queue.ParseGrant(payload)
	if !ok {
		return
	}
	ln.mu.Lock()
	var d handOff
	if ticket != "" && ticket == ln.ticket && !ln.sh.closed.Load() {
		// Its claim began after the last call that found the ticket still
		// waiting was sent.
		d = ln.pass(grant{ticket: ticket, token: token, last: last, deadline: ln.since.Add(ln.sh.cfg.ClaimLease), claim: true})
	}
	ln.tend()
	ln.mu.Unlock()
	d.deliver()
}

// recheckIn is when a waiting process looks again by itself: right after
// the holder's remaining lease if that is shorter than interval, else
// after interval, jittered either way, so that processes do not re-check
// in step.
func recheckIn(interval, holderLease time.Duration) time.Duration {
	if holderLease > 0 && holderLease < interval {
		return holderLease + time.Millisecond + rand.N(holderLease/4+time.Millisecond)
	}
	return lease.Jitter(interval)
}
