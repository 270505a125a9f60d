package handoff

import (
	"cmp"
	"context"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
)

// The line's events when a hold ends: the lock goes to the next goroutine
// here in memory, or back to Redis; a check of a hold handed on in memory
// comes back; a lease is lost; Close.

// releaseStep is a release under way: either the ticket its call to Redis
// puts the process back in line under (requeue), or, when the lock was
// handed on in memory, the check that answers it (checked).
type releaseStep struct {
	requeue string
	checked <-chan error
}

// releaseBegins: h's release begins (e is its lease as it began). The lock
// goes to the next goroutine here in memory (passHeld; the step's checked
// answers the release), or the release goes to Redis, and puts the process
// back in line under the step's requeue ticket for its waiting goroutines:
// only once the driver listens for grants, or a grant to it would reach
// nobody.
func (ln *line) releaseBegins(h *Hold, e lease.Ending) releaseStep {
	ln.mu.Lock()
	if checked, d := ln.passHeld(h, e); checked != nil {
		ln.tend()
		ln.mu.Unlock()
		d.deliver()
		return releaseStep{checked: checked}
	}
	if h.run != nil {
		h.run.ended = true
	}
	var st releaseStep
	if ln.state == held && ln.holder == h {
		ln.state = releasing
		if len(ln.waiters) > 0 && ln.driver == listening && !ln.sh.closed.Load() {
			st.requeue = ln.newTicket()
		}
	}
	ln.mu.Unlock()
	return st
}

// passHeld hands the lock h holds to the oldest waiting goroutine in
// memory, without a call to Redis, if h has a reserved token left
// (grant.last) and at least half a lease (e is h's lease as its release
// began): the key stays as it is, owned by h's ticket, and the new hold
// carries that ticket, the next token, and h's deadline. The tokens were
// reserved in Redis with the first (the counter holds the last of them),
// so they increase from hold to hold, and whoever takes the lock after
// this run gets a larger one, even if this process dies mid-run. A process
// thus holds the lock at most 1 + Reserve times in a row while another
// waits.
//
// Nothing has checked the key since h's hold began, and Redis may have
// lost it meanwhile (a restart, a failover, an eviction). So the new hold
// renews its lease at once, and h's release waits for that check, or any
// later one of the run (run, in hold.go): passHeld returns the channel that
// answers it, nil when it did not hand the lock on. With renewal disabled,
// every hold gets a lease of its own from Redis instead, and with replica
// acknowledgement, an acquisition of its own to confirm.
func (ln *line) passHeld(h *Hold, e lease.Ending) (<-chan error, handOff) {
	c := ln.sh.cfg
	if ln.state != held || ln.holder != h || len(ln.waiters) == 0 || ln.sh.closed.Load() ||
		c.NoLocalRuns || h.token >= h.last || h.run.lost != nil || e.LostErr != nil {
		return nil, handOff{}
	}
	g := grant{ticket: h.owner, token: h.token + 1, last: h.last, deadline: e.Deadline, claim: e.Claim, run: h.run}
	least := c.TTL / 2
	if g.claim {
		// A claim, still being extended (the new hold extends it too): half
		// of it, as pass asks of any grant with one.
		least = c.ClaimLease / 2
	}
	if time.Until(g.deadline) < least {
		return nil, handOff{}
	}
	checked := h.run.await() // before the new hold's check is sent
	ln.holder = nil
	return checked, ln.handTo(g)
}

// releaseEnded: h's release, sent at sent, came back with res or err
// (released is its verdict). It is the last check of h's run: it answers
// the releases that handed the lock on before it, if no renewal did; with
// its error if it failed, as nothing of the run will check again. It
// returns a ticket of this process that the lock went to and that nobody
// here takes: the caller withdraws it, which passes the lock on.
func (ln *line) releaseEnded(h *Hold, sent time.Time, released bool, res queue.Released, err error) (unwanted string) {
	ln.mu.Lock()
	if h.run != nil {
		if err == nil && released {
			h.run.confirmed(sent)
		} else {
			h.run.runLost(cmp.Or(err, lease.ErrLeaseLost))
		}
	}
	var d handOff
	switch {
	case ln.state != releasing || ln.holder != h:
		// A grant message for the requeue ticket came first and made
		// another hold the holder, or the driver gave the ticket up (nobody
		// waits), or the line was forgotten when h lost its lease.
		if err == nil && res.Granted && res.Ticket != ln.ticket {
			unwanted = res.Ticket
		}
	default:
		ln.holder, ln.state = nil, free
		ticket := ln.ticket // the requeue ticket, unless the driver gave it up
		ln.ticket = ""
		switch {
		case err != nil || res.RequeueLost:
			// The call that carried the ticket got no reply: it may or may
			// not be in line, or even granted.
			if ticket != "" {
				ln.withdrawing = append(ln.withdrawing, ticket)
			}
		case res.Granted && (res.Ticket != ticket || ln.sh.closed.Load()):
			unwanted = res.Ticket // a ticket of ours nobody here takes: pass it on
		case res.Granted:
			ln.ticket, ln.since = ticket, sent
			d = ln.pass(grant{ticket: res.Ticket, token: res.Token, last: res.Last, deadline: res.Deadline})
		case res.Queued && ticket != "":
			ln.state, ln.ticket, ln.since = queued, ticket, sent
			ln.checkAt = time.Now()
			if !ln.recheckNow {
				ln.checkAt = ln.checkAt.Add(lease.Jitter(ln.sh.cfg.RecheckInterval))
			}
		}
		ln.recheckNow = false
	}
	ln.tend()
	ln.mu.Unlock()
	d.deliver()
	return unwanted
}

// checked: a check of h's run, sent at sent, found the key the run's (ok)
// or not. Not: the run is lost, unless its own release may have deleted
// the key; the run's current holder is told at once, then every release
// waiting for a check.
func (ln *line) checked(h *Hold, sent time.Time, ok bool) {
	ln.mu.Lock()
	r := h.run
	if ok {
		r.confirmed(sent)
		ln.mu.Unlock()
		return
	}
	if !r.foundLost(lease.ErrLeaseLost) {
		ln.mu.Unlock()
		return
	}
	var current *Hold
	if ln.holder != nil && ln.holder.run == r {
		current = ln.holder
	}
	ln.mu.Unlock()
	if current != nil {
		current.Lose(lease.ErrLeaseLost) // tells leaseEnded, which takes the mutex
	}
	ln.mu.Lock()
	r.runLost(lease.ErrLeaseLost)
	ln.mu.Unlock()
}

// leaseEnded: h lost its lease. It no longer keeps this process's other
// waiters from getting the lock from Redis, and its run is over.
func (ln *line) leaseEnded(h *Hold, cause error) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if h.run != nil {
		h.run.runLost(cause)
	}
	if ln.state == held && ln.holder == h {
		ln.holder, ln.state = nil, free
	}
	ln.tend()
}

// shutdown: Close has begun. It returns the hold of this process, if any,
// for Close to end, and the tickets to withdraw.
func (ln *line) shutdown() (holder *Hold, tickets []string) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.state == held || ln.state == releasing {
		holder = ln.holder
	}
	tickets = ln.withdrawing
	if ln.ticket != "" {
		tickets = append(tickets, ln.ticket)
	}
	ln.ticket, ln.withdrawing = "", nil
	if ln.state == queued || ln.state == joining {
		ln.state = free
	}
	return holder, tickets
}

// Renew asks Redis to extend the lease (lease.Holder). Its answer is also
// a check of the run: a key still the run's proves exclusive every hold of
// it that ended before the request was sent.
func (h *Hold) Renew(ctx context.Context) (time.Time, bool, error) {
	sent := time.Now()
	deadline, ok, err := h.ln.sh.backend.Extend(ctx, h.ln.k, h.owner)
	if err == nil && h.run != nil {
		h.ln.checked(h, sent, ok)
	}
	return deadline, ok, err
}

// LeaseLost: the hold lost its lease (lease.Holder).
func (h *Hold) LeaseLost(cause error) { h.ln.leaseEnded(h, cause) }
