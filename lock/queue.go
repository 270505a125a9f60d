package lock

import (
	"slices"
	"time"

	"github.com/google/uuid"
)

// queue is this process's state for one lock name: which of its goroutines
// hold or wait for the lock, and where the process stands in Redis.
// Goroutines that want a lock that another goroutine of this process holds
// or awaits wait here, first come first served, instead of polling Redis;
// one driver goroutine (driver.go) contends in Redis for all of them. In
// Redis the process is one entry in the lock's queue, under a ticket: a
// fresh UUID that becomes the owner of the acquisition it wins.
//
// The queue is a state machine. Each event is one method below, called
// under Locker.mu, that moves it between the states and says what the
// caller must do next; nothing else writes its fields. After each event
// the caller calls Locker.tend, which starts or wakes the driver while the
// queue has work and forgets the queue when it has none.
type queue struct {
	l     *Locker
	name  string
	k     keys
	state state

	waiters []*waiter // oldest first; in any state
	holder  *Lock     // held, releasing: the Lock of this process that holds it

	// ticket is the UUID the process is queued, or being queued, under in
	// Redis (releasing, registering, queued), or that a pending grant was
	// made to (granted). A grant message for any other ticket is stale.
	// Releasing without a ticket to queue under leaves it "".
	ticket string
	// since is no later than any grant to ticket can have happened: the
	// ticket's creation, then the send time of each call that found it
	// still waiting. A grant's claim lease lasts at least until since plus
	// the claim lease.
	since time.Time
	// checkAt is when the queued process asks Redis itself (the re-check),
	// if no grant has come by then.
	checkAt time.Time
	// recheckNow: while a call queueing the process is in flight
	// (releasing, registering), a grant to its ticket came too late in its
	// claim lease to hand out; the re-check is due as soon as the call
	// returns.
	recheckNow bool
	// pending is the grant that came when no goroutine waited (granted):
	// the next one to arrive takes it, or the driver withdraws it.
	pending grant
	// withdrawing lists tickets the driver is to withdraw: nobody here
	// wants them any more, or a call carrying one failed and its fate is
	// unknown. None is q.ticket, so a grant for one that arrives meanwhile
	// is stale; the withdraw passes such a grant on.
	withdrawing []string

	driver   driverState
	wakeup   chan struct{} // wakes the driver; capacity 1, made with the driver
	subChans []*subChannel // the subscription entries the current driver added
	lastErr  error         // the driver's last Redis error, for the waiters' error
}

// state is where the process stands for one lock.
type state int

const (
	// free: no Lock of this process holds the lock, and the process is not
	// queued in Redis. With waiters, the driver queues it.
	free state = iota
	// trying: the first goroutine's direct attempt (tryOnce) is in flight;
	// goroutines that arrive meanwhile wait behind it.
	trying
	// held: q.holder holds the lock.
	held
	// releasing: q.holder's release is in flight; with q.ticket set, it
	// also queues the process under that ticket, for its waiters.
	releasing
	// registering: the driver's call queueing the process under q.ticket,
	// or refreshing its place, is in flight.
	registering
	// queued: the process stands in the lock's queue in Redis under
	// q.ticket, waiting for a grant message, or the re-check at q.checkAt.
	queued
	// granted: q.pending, a grant to q.ticket, waits for a goroutine.
	granted
)

func (s state) String() string {
	return [...]string{"free", "trying", "held", "releasing", "registering", "queued", "granted"}[s]
}

// driverState is the life of q's driver goroutine.
type driverState int

const (
	stopped     driverState = iota
	starting                // running, not yet subscribed to the grant channel
	subscribing             // its subscription is being set up
	listening               // a grant published from now on reaches this process
)

type waiter struct {
	ch chan *Lock // capacity 1: receives the lock when it is passed to it
}

// grant is a lock won for a ticket of this process, not yet passed to a
// goroutine.
type grant struct {
	ticket string
	token  int64
	// last is the last fencing token reserved with token (0: none). The
	// tokens after token up to last go with the lock's passes in memory
	// (passHeld), under the same owner.
	last     int64
	deadline time.Time // the lease lasts at least until then
	// claim: the lease is a grant's claim lease, shorter than the TTL; the
	// Lock extends it at once (common.lua's grant_lease says why).
	claim bool
	// run: the lock is passed in memory, without Redis, in this run of
	// holds under one owner (passHeld); the Lock renews at once, to check
	// that the key is still the run's.
	run *run
}

func (l *Locker) newQueue(name string) *queue {
	q := &queue{l: l, name: name, k: newKeys(l.opts.Prefix, name)}
	l.queues[name] = q
	return q
}

// newTicket starts a new registration.
func (q *queue) newTicket() string {
	q.ticket = uuid.NewString()
	q.since = time.Now()
	q.recheckNow = false
	return q.ticket
}

// dropTicket gives q's ticket up, for the driver to withdraw, and leaves
// the process free.
func (q *queue) dropTicket() {
	if q.ticket != "" {
		q.withdrawing = append(q.withdrawing, q.ticket)
	}
	q.ticket, q.pending, q.recheckNow, q.state = "", grant{}, false, free
}

// busy reports whether a goroutine of this process holds the lock or is
// taking it.
func (q *queue) busy() bool { return q.state == trying || q.state == held || q.state == releasing }

// ---- Goroutines arrive and leave ----

// tryStart: the first goroutine to want the lock, with nobody else here,
// tries Redis directly (tryOnce).
func (q *queue) tryStart() { q.state = trying }

// tried: the direct attempt came back with g (nil: the lock is taken, or
// the attempt failed). It returns the Lock won.
func (q *queue) tried(g *grant) *Lock {
	q.state = free
	if g == nil {
		return nil
	}
	q.holder = q.l.newLock(q, *g)
	q.state = held
	return q.holder
}

// arrive queues w, at the front for the goroutine whose direct attempt
// found the lock taken (it came first). A pending grant goes to it.
func (q *queue) arrive(w *waiter, front bool) {
	if front {
		q.waiters = slices.Insert(q.waiters, 0, w)
	} else {
		q.waiters = append(q.waiters, w)
	}
	if q.state == granted {
		q.pass(q.pending)
	}
}

// leave takes w out of line, and reports false if the lock was passed to
// it already.
func (q *queue) leave(w *waiter) bool {
	i := slices.Index(q.waiters, w)
	if i < 0 {
		return false
	}
	q.waiters = slices.Delete(q.waiters, i, i+1)
	return true
}

// ---- Passing the lock to a goroutine ----

// pass gives a lock won for g.ticket to the oldest waiting goroutine; with
// none, it keeps the grant pending. A grant whose claim lease has too
// little left to count on its extension landing in time (the process was
// paused, or the grant waited for a goroutine) is left to the re-check
// instead, due at once: the acquire script extends it to the full lease
// if it is still ours, and finds our place gone otherwise. The Locker is
// not closed.
func (q *queue) pass(g grant) {
	switch {
	case g.claim && time.Until(g.deadline) < q.l.opts.claimLease()/2:
		q.ticket, q.pending = g.ticket, grant{}
		if q.state == releasing || q.state == registering {
			q.recheckNow = true // the call's reply decides what comes next
		} else {
			q.state, q.checkAt = queued, time.Now()
		}
	case len(q.waiters) == 0:
		q.ticket, q.pending, q.state = g.ticket, g, granted
	default:
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		q.ticket, q.pending, q.recheckNow = "", grant{}, false
		q.holder = q.l.newLock(q, g)
		q.state = held
		w.ch <- q.holder
	}
}

// grantArrived: a grant message for ticket. Its claim lease started after
// the last call that found the ticket still waiting was sent.
func (q *queue) grantArrived(ticket string, token, last int64) {
	if ticket == "" || ticket != q.ticket || q.state == granted {
		return // stale: taken through a reply, or withdrawn
	}
	q.pass(grant{ticket: ticket, token: token, last: last, deadline: q.since.Add(q.l.opts.claimLease()), claim: true})
}

// woken: a release somewhere may have freed the lock (Redlock's wake
// message). A process waiting without a place in a queue tries again now.
func (q *queue) woken() {
	if q.state == queued {
		q.checkAt = time.Now()
	}
}

// ---- The holder releases ----

// passHeld passes the lock lk holds to the oldest waiter in memory, without
// a call to Redis, if lk has a reserved token left (grant.last) and at
// least half a lease: the key stays as it is, owned by lk's ticket, and the
// new Lock carries that ticket, the next token, and lk's deadline. The
// tokens were reserved in Redis with the first (the counter holds the last
// of them), so they increase from hold to hold, and whoever takes the lock
// after this run gets a larger one, even if this process dies mid-run.
// Each reply reserves burst - 1, so a process holds at most burst times in
// a row while another waits.
//
// Nothing has checked the key since lk's hold began, and Redis may have
// lost it meanwhile (a restart, a failover, an eviction). So the new Lock
// renews its lease at once, and lk's Release waits for that check, or any
// later one of the run (see run): passHeld returns the channel that
// answers it, nil when it did not pass the lock. With renewal disabled,
// every Lock gets a lease of its own from Redis instead, and with
// WaitReplicas, an acquisition of its own to confirm on the replicas.
func (q *queue) passHeld(lk *Lock) <-chan error {
	o := q.l.opts
	if q.state != held || q.holder != lk || len(q.waiters) == 0 || q.l.closed ||
		o.DisableRenewal || o.WaitReplicas > 0 || lk.token >= lk.last || lk.run.lost != nil {
		return nil
	}
	lk.mu.Lock()
	g := grant{ticket: lk.owner, token: lk.token + 1, last: lk.last, deadline: lk.deadline, claim: lk.claim, run: lk.run}
	lost := lk.lostErr != nil
	lk.mu.Unlock()
	least := o.TTL / 2
	if g.claim {
		// A claim lease, still being extended (the new Lock extends it
		// too): half of it, as pass asks of any grant with one.
		least = o.claimLease() / 2
	}
	if lost || time.Until(g.deadline) < least {
		return nil
	}
	checked := lk.run.await() // before the new Lock's check is sent
	q.holder = nil
	q.pass(g) // to a waiter: the claim's remainder was judged above, on one clock reading
	return checked
}

// release: lk's release goes to Redis. If goroutines wait, and the process
// listens for grants, the release also queues the process under a new
// ticket, which it returns; if the process is first in line, the lock
// comes straight back to it.
func (q *queue) release(lk *Lock) (requeue string) {
	if lk.run != nil {
		lk.run.ended = true
	}
	if q.state != held || q.holder != lk {
		return ""
	}
	q.state = releasing
	if len(q.waiters) > 0 && q.driver == listening && !q.l.closed {
		return q.newTicket()
	}
	return ""
}

// released: lk's release, which was to queue the process under requeue,
// came back; sent is when it was sent. It returns a ticket of this process
// that the lock was granted to and that nobody here takes: the caller
// withdraws it, which passes the lock on.
func (q *queue) released(lk *Lock, requeue string, sent time.Time, res releaseResult, err error) (unwanted string) {
	if q.state != releasing || q.holder != lk {
		// A grant message for requeue came first and made another Lock
		// the holder, or the driver gave requeue up (nobody waits).
		if err == nil && res.granted && res.ticket != q.ticket {
			return res.ticket
		}
		return ""
	}
	q.holder, q.state = nil, free
	ticket := q.ticket // requeue, unless the driver gave it up
	q.ticket = ""
	switch {
	case err != nil || res.requeueLost:
		// The call that carried requeue got no reply: the ticket may or
		// may not be queued, or even granted.
		if ticket != "" {
			q.withdrawing = append(q.withdrawing, ticket)
		}
	case res.granted && (res.ticket != ticket || q.l.closed):
		return res.ticket // a ticket of ours nobody here takes: pass it on
	case res.granted:
		q.ticket, q.since = ticket, sent
		q.pass(grant{ticket: res.ticket, token: res.token, last: res.last, deadline: res.deadline})
	case res.queued && ticket != "":
		q.state, q.ticket, q.since = queued, ticket, sent
		if q.recheckNow {
			q.checkAt = time.Now()
		} else {
			q.checkAt = time.Now().Add(q.l.jitter(q.l.opts.RecheckInterval))
		}
	}
	q.recheckNow = false
	return ""
}

// lost: lk lost its lease; it no longer keeps the other goroutines from
// contending.
func (q *queue) lost(lk *Lock) {
	if q.state == held && q.holder == lk {
		q.holder, q.state = nil, free
	}
}

// ---- The driver ----

// action is what the driver does next.
type action int

const (
	stop      action = iota // nothing left to do: unsubscribe and end
	sleep                   // wait for a wake-up, or until the re-check (q.checkAt)
	withdraw                // withdraw q.withdrawing[0]
	subscribe               // listen on the lock's grant channel
	register                // queue the process under a new ticket
	refresh                 // refresh its place under q.ticket: the re-check
)

// next says what the driver does now. It gives up a ticket nobody waits
// for before anything else.
func (q *queue) next() action {
	if len(q.waiters) == 0 && q.ticket != "" && q.state != registering {
		// Nobody waits any more (their waits ended). A release in flight
		// then finds the ticket gone, and passes on a grant to it.
		if q.state == releasing {
			q.withdrawing = append(q.withdrawing, q.ticket)
			q.ticket = ""
		} else {
			q.dropTicket()
		}
	}
	switch {
	case len(q.withdrawing) > 0:
		return withdraw
	case len(q.waiters) == 0:
		return stop
	case q.driver == starting:
		return subscribe
	case q.state == free:
		return register
	case q.state == queued && !time.Now().Before(q.checkAt):
		return refresh
	}
	// trying, held, releasing: a release wakes us (and may pass the lock
	// straight to a waiter); granted: arrive passes it; queued: a grant
	// message or the re-check; registering: the reply.
	return sleep
}

// withdrawn: the withdraw of ticket succeeded.
func (q *queue) withdrawn(ticket string) {
	q.withdrawing = slices.DeleteFunc(q.withdrawing, func(s string) bool { return s == ticket })
}

// sending: the driver sends the call that registers (a new ticket) or
// refreshes the process's place, and returns the ticket it carries.
func (q *queue) sending(a action) string {
	if a == register {
		q.newTicket()
	}
	q.state = registering
	return q.ticket
}

// attempted: the driver's call for ticket, sent at sent, came back. It
// returns how long the driver pauses.
func (q *queue) attempted(ticket string, sent time.Time, res acquireResult, err error, failures int) pause {
	if q.state != registering || q.ticket != ticket {
		return atOnce // a grant message got there first, or the ticket was given up
	}
	switch {
	case err != nil:
		// The call may have run, or may still run: never reuse a ticket
		// whose fate is unknown. Withdraw it and start over with a new one.
		q.lastErr = err
		q.dropTicket()
		return pause(q.l.backoff(failures))
	case res.status == acquired:
		q.pass(grant{ticket: res.owner, token: res.token, deadline: res.deadline})
		return untilWoken
	case res.status == placeLost, res.status == withdrawnTicket:
		q.ticket, q.state = "", free // queue again at once, under a new ticket
		return atOnce
	case !res.queued:
		// Taken, and the backend keeps no place for us (Redlock): try
		// again after the holder's remaining lease, or when woken.
		q.ticket, q.state = "", free
		return pause(q.l.recheckIn(res.retryIn))
	}
	q.state, q.since = queued, sent
	if q.recheckNow {
		// A grant for the ticket came while the call was on its way, too
		// late in its claim lease to hand out: the re-check takes it while
		// it lasts.
		q.recheckNow = false
		q.checkAt = time.Now()
		return atOnce
	}
	wait := q.l.recheckIn(res.retryIn)
	q.checkAt = time.Now().Add(wait)
	return pause(wait)
}

// ---- Close ----

// close hands Close what it must end: the Lock held here, if any, and the
// tickets to withdraw.
func (q *queue) close() (holder *Lock, tickets []string) {
	if q.state == held || q.state == releasing {
		holder = q.holder
	}
	tickets = q.withdrawing
	if q.ticket != "" {
		tickets = append(tickets, q.ticket)
	}
	q.ticket, q.withdrawing, q.pending = "", nil, grant{}
	if q.state == granted || q.state == queued || q.state == registering {
		q.state = free
	}
	return holder, tickets
}
