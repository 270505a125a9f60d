package lock

import (
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
	// withdrawing lists tickets the driver is to withdraw: nobody here
	// wants them any more, or a call carrying one failed and its fate is
	// unknown. None is q.ticket, so a grant for one that arrives meanwhile
	// is stale; the withdraw passes such a grant on.
	withdrawing []string

	driving    bool          // the driver goroutine runs
	kick       chan struct{} // wakes the driver; capacity 1, made with the driver
	subscribed bool          // the channel is in the Locker's subscription
	// listening: the subscription is in place (the server confirmed it, or
	// the wait for that ended), so a grant published from now on reaches
	// this process. Nothing queues the process in Redis before that.
	listening bool
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
	ticket string
	token  int64
	// last is the last fencing token reserved with token (0: none). The
	// tokens after token up to last go with the lock's local hand-offs
	// (Locker.release), under the same owner.
	last     int64
	deadline time.Time // the lease lasts at least until then
	// claim: the lease is a grant's claim lease, shorter than the TTL; the
	// Lock extends it at once (common.lua's grant_lease says why).
	claim bool
	// run: the lock is passed on within the process, without Redis, in
	// this run of holds under one owner (Locker.passOn); the Lock renews
	// at once, to confirm that the key is still the run's.
	run *run
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

// withdrawTicket moves the current ticket to q.withdrawing, for the driver
// to withdraw. Caller holds Locker.mu.
func (q *queue) withdrawTicket() {
	if q.ticket != "" {
		q.withdrawing = append(q.withdrawing, q.ticket)
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
	if len(q.waiters) > 0 || q.ticket != "" || len(q.withdrawing) > 0 {
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
	l.give(q, g)
}

// give hands g to the oldest local waiter, of which there is one. Caller
// holds Locker.mu and has checked that the Locker is not closed.
func (l *Locker) give(q *queue, g grant) {
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
func (l *Locker) deliverGrant(q *queue, ticket string, token, last int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q.ticket != ticket || ticket == "" || q.pending != nil || l.closed {
		return // stale: taken through a reply, or withdrawn
	}
	l.handOff(q, grant{ticket: ticket, token: token, last: last, deadline: q.ticketSince.Add(l.opts.claimLease()), claim: true})
	l.settle(q)
}
