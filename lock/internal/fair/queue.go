package fair

import (
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// queue is this process's state for one lock name: which of its goroutines
// hold or wait for the lock, where the process stands in Redis, and the
// life of its driver (the goroutine that contends in Redis for the
// waiters, driver.go).
//
// It is a state machine. Each event is one method below that moves it
// between states and returns what the caller must do next; nothing else
// writes its fields. The methods are called only from the Locker's events
// (events.go), under Locker.mu; after each, the event calls Locker.tend,
// which starts or wakes the driver while the queue has work and forgets
// the queue when it has none.
type queue struct {
	l     *Locker
	name  string
	k     core.Keys
	state state

	waiters []*waiter // oldest first; in any state
	holder  *Hold     // held, releasing: the hold of this process

	// ticket is the UUID the process is queued, or being queued, under in
	// Redis (releasing, registering, queued), or that the pending grant was
	// made to (granted). A grant message for any other ticket is stale.
	// Releasing without a ticket to queue under leaves it "".
	ticket string
	// since is no later than any grant to ticket can have happened: the
	// ticket's creation, then the send time of each call that found it
	// still waiting. A grant's claim lease lasts at least until since plus
	// the claim lease.
	since time.Time
	// checkAt (queued) is when the process asks Redis itself (the
	// re-check), if no grant has come by then.
	checkAt time.Time
	// recheckNow (releasing, registering): a grant to ticket came while the
	// call queueing the process was in flight, too late in its claim lease
	// to hand out; the re-check is due as soon as the call returns.
	recheckNow bool
	// pending (granted) is the grant that came when no goroutine waited:
	// the next one to arrive takes it, or the driver withdraws it.
	pending grant
	// withdrawing lists tickets the driver is to withdraw: nobody here
	// wants them any more, or a call carrying one failed and its fate is
	// unknown. None is ticket, so a grant for one is stale; the withdraw
	// passes such a grant on.
	withdrawing []string

	driver  driverState
	wakeup  chan struct{} // wakes the driver; capacity 1, made with the first driver
	subs    []*subEntry   // the subscription entries the current driver added
	lastErr error         // the driver's last Redis error, for the waiters' error
}

// state is where the process stands for one lock.
type state int

const (
	// free: no hold of this process, and the process is not queued in
	// Redis. With waiters, the driver queues it.
	free state = iota
	// trying: the first goroutine's direct attempt is in flight;
	// goroutines that arrive meanwhile wait behind it.
	trying
	// held: holder holds the lock.
	held
	// releasing: holder's release is in flight; with ticket set, it also
	// queues the process under that ticket, for its waiters.
	releasing
	// registering: the driver's call queueing the process under ticket,
	// or refreshing its place, is in flight.
	registering
	// queued: the process stands in the lock's queue in Redis under
	// ticket, waiting for a grant message, or the re-check at checkAt.
	queued
	// granted: pending, a grant to ticket, waits for a goroutine.
	granted
)

func (s state) String() string {
	return [...]string{"free", "trying", "held", "releasing", "registering", "queued", "granted"}[s]
}

// driverState is the life of the queue's driver goroutine.
type driverState int

const (
	stopped     driverState = iota
	starting                // running, not yet subscribed to the grant channel
	subscribing             // its subscription is being set up
	listening               // a grant published from now on reaches this process
)

type waiter struct {
	ch chan *Hold // capacity 1: receives the lock when it is passed to it
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
	// hold extends it at once (common.lua's grant_lease says why).
	claim bool
	// run: the lock is passed in memory, without Redis, in this run of
	// holds under one owner (passHeld); the hold renews at once, to check
	// that the key is still the run's.
	run *run
}

// handOff is a hold passed to a waiting goroutine, delivered once the
// event that made it has released the mutex: the goroutine gets it, then
// its lease starts. In that order the renewal that start spawns at once
// (the check of a hold passed in memory, the extension of a claim) is the
// goroutine the scheduler runs next, so it is sent while the new holder
// works, rather than after it, when the hold may be over and the check
// skipped.
type handOff struct {
	w *waiter
	h *Hold
}

func (d handOff) deliver() {
	if d.h != nil {
		d.w.ch <- d.h
		d.h.start()
	}
}

// newQueue is the state of the lock whose keys are k, which nobody here
// holds or awaits yet.
func newQueue(l *Locker, k core.Keys) *queue {
	return &queue{l: l, name: k.Name, k: k}
}

// busy reports whether a goroutine of this process holds the lock or is
// taking it.
func (q *queue) busy() bool { return q.state == trying || q.state == held || q.state == releasing }

// hasWork reports whether the driver has something to do: goroutines
// waiting, a ticket, tickets to withdraw.
func (q *queue) hasWork() bool { return len(q.waiters) > 0 || q.ticket != "" || len(q.withdrawing) > 0 }

// idle reports whether the queue may be forgotten: nobody here holds,
// takes or awaits the lock, and the driver has ended.
func (q *queue) idle() bool { return q.driver == stopped && !q.busy() && len(q.waiters) == 0 }

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

// ---- Goroutines arrive and leave ----

// tryStart: the first goroutine to want the lock, with nobody else here,
// tries Redis directly.
func (q *queue) tryStart() { q.state = trying }

// tried: the direct attempt came back with g (nil: the lock is taken, or
// the attempt failed). It returns the hold won.
func (q *queue) tried(g *grant) *Hold {
	q.state = free
	if g == nil {
		return nil
	}
	q.holder = q.l.newHold(q, *g)
	q.state = held
	return q.holder
}

// arrive queues w, at the front for the goroutine whose direct attempt
// found the lock taken (it came first). A pending grant goes to it.
func (q *queue) arrive(w *waiter, front bool) handOff {
	if front {
		q.waiters = slices.Insert(q.waiters, 0, w)
	} else {
		q.waiters = append(q.waiters, w)
	}
	if q.state == granted {
		return q.pass(q.pending)
	}
	return handOff{}
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

// pass gives a lock won for g.ticket to the oldest waiting goroutine
// (handTo); with none, it keeps the grant pending (keep). A grant whose
// claim lease has too little left to count on its extension landing in
// time (the process was paused, or the grant waited for a goroutine) is
// left to the re-check instead (recheckSoon). The Locker is not closed.
func (q *queue) pass(g grant) handOff {
	switch {
	case g.claim && time.Until(g.deadline) < q.l.cfg.ClaimLease/2:
		q.recheckSoon(g.ticket)
	case len(q.waiters) == 0:
		q.keep(g)
	default:
		return q.handTo(g)
	}
	return handOff{}
}

// recheckSoon: the re-check, due at once, takes a grant to ticket whose
// claim lease is nearly over: the acquire script extends it to the full
// lease if it is still ours, and finds our place gone otherwise. With a
// call queueing the process in flight, its reply decides what comes next.
func (q *queue) recheckSoon(ticket string) {
	q.ticket, q.pending = ticket, grant{}
	if q.state == releasing || q.state == registering {
		q.recheckNow = true
		return
	}
	q.state, q.checkAt = queued, time.Now()
}

// keep: a grant with nobody waiting waits for the next goroutine.
func (q *queue) keep(g grant) {
	q.ticket, q.pending, q.state = g.ticket, g, granted
}

// handTo gives the lock to the oldest waiting goroutine.
func (q *queue) handTo(g grant) handOff {
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	q.ticket, q.pending, q.recheckNow = "", grant{}, false
	q.holder = q.l.newHold(q, g)
	q.state = held
	return handOff{w, q.holder}
}

// grantArrived: a grant message for ticket. Its claim lease started after
// the last call that found the ticket still waiting was sent.
func (q *queue) grantArrived(ticket string, token, last int64) handOff {
	if ticket == "" || ticket != q.ticket || q.state == granted {
		return handOff{} // stale: taken through a reply, or withdrawn
	}
	return q.pass(grant{ticket: ticket, token: token, last: last, deadline: q.since.Add(q.l.cfg.ClaimLease), claim: true})
}

// woken: a release somewhere may have freed the lock (Redlock's wake
// message). A process waiting without a place in a queue tries again now.
func (q *queue) woken() {
	if q.state == queued {
		q.checkAt = time.Now()
	}
}

// ---- The holder releases ----

// passHeld passes the lock h holds to the oldest waiter in memory, without
// a call to Redis, if h has a reserved token left (grant.last) and at
// least half a lease (e is h's lease as its release began): the key stays
// as it is, owned by h's ticket, and the new hold carries that ticket, the
// next token, and h's deadline. The tokens were reserved in Redis with the
// first (the counter holds the last of them), so they increase from hold
// to hold, and whoever takes the lock after this run gets a larger one,
// even if this process dies mid-run. Each reply reserves core.Burst - 1,
// so a process holds at most core.Burst times in a row while another
// waits.
//
// Nothing has checked the key since h's hold began, and Redis may have
// lost it meanwhile (a restart, a failover, an eviction). So the new hold
// renews its lease at once, and h's release waits for that check, or any
// later one of the run (see run): passHeld returns the channel that
// answers it, nil when it did not pass the lock. With renewal disabled,
// every hold gets a lease of its own from Redis instead, and with replica
// acknowledgement, an acquisition of its own to confirm.
func (q *queue) passHeld(h *Hold, e lease.Ending) (<-chan error, handOff) {
	c := q.l.cfg
	if q.state != held || q.holder != h || len(q.waiters) == 0 || q.l.closed ||
		c.NoLocalRuns || h.token >= h.last || h.run.lost != nil || e.LostErr != nil {
		return nil, handOff{}
	}
	g := grant{ticket: h.owner, token: h.token + 1, last: h.last, deadline: e.Deadline, claim: e.Claim, run: h.run}
	least := c.TTL / 2
	if g.claim {
		// A claim lease, still being extended (the new hold extends it
		// too): half of it, as pass asks of any grant with one.
		least = c.ClaimLease / 2
	}
	if time.Until(g.deadline) < least {
		return nil, handOff{}
	}
	checked := h.run.await() // before the new hold's check is sent
	q.holder = nil
	return checked, q.handTo(g) // the claim's remainder was judged above, on one clock reading
}

// release: h's release goes to Redis. If goroutines wait, and the process
// listens for grants, the release also queues the process under a new
// ticket, which it returns; if the process is first in line, the lock
// comes straight back to it.
func (q *queue) release(h *Hold) (requeue string) {
	if q.state != held || q.holder != h {
		return ""
	}
	q.state = releasing
	if len(q.waiters) > 0 && q.driver == listening && !q.l.closed {
		return q.newTicket()
	}
	return ""
}

// released: h's release, which was to queue the process under requeue,
// came back; sent is when it was sent. It returns a ticket of this process
// that the lock was granted to and that nobody here takes: the caller
// withdraws it, which passes the lock on.
func (q *queue) released(h *Hold, requeue string, sent time.Time, res core.ReleaseResult, err error) (unwanted string, d handOff) {
	if q.state != releasing || q.holder != h {
		// A grant message for requeue came first and made another hold
		// the holder, or the driver gave requeue up (nobody waits).
		if err == nil && res.Granted && res.Ticket != q.ticket {
			return res.Ticket, d
		}
		return "", d
	}
	q.holder, q.state = nil, free
	ticket := q.ticket // requeue, unless the driver gave it up
	q.ticket = ""
	switch {
	case err != nil || res.RequeueLost:
		// The call that carried requeue got no reply: the ticket may or
		// may not be queued, or even granted.
		if ticket != "" {
			q.withdrawing = append(q.withdrawing, ticket)
		}
	case res.Granted && (res.Ticket != ticket || q.l.closed):
		return res.Ticket, d // a ticket of ours nobody here takes: pass it on
	case res.Granted:
		q.ticket, q.since = ticket, sent
		d = q.pass(grant{ticket: res.Ticket, token: res.Token, last: res.Last, deadline: res.Deadline})
	case res.Queued && ticket != "":
		q.state, q.ticket, q.since = queued, ticket, sent
		if q.recheckNow {
			q.checkAt = time.Now()
		} else {
			q.checkAt = time.Now().Add(q.l.jitter(q.l.cfg.RecheckInterval))
		}
	}
	q.recheckNow = false
	return "", d
}

// lost: h lost its lease; it no longer keeps the other goroutines from
// contending.
func (q *queue) lost(h *Hold) {
	if q.state == held && q.holder == h {
		q.holder, q.state = nil, free
	}
}

// ---- The driver ----

// action is what the driver does next.
type action int

const (
	stop      action = iota // nothing left to do: unsubscribe and end
	sleep                   // wait for a wake-up, or until the re-check (checkAt)
	withdraw                // withdraw withdrawing[0]
	subscribe               // listen on the lock's grant channel
	register                // queue the process under a new ticket
	refresh                 // refresh its place under ticket: the re-check
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

// driverStarts: a driver is started for the queue.
func (q *queue) driverStarts() {
	q.driver = starting
	if q.wakeup == nil {
		q.wakeup = make(chan struct{}, 1)
	}
}

// driverSubscribes: the driver sets up its subscription.
func (q *queue) driverSubscribes() { q.driver = subscribing }

// subscribedWith: the driver added subs, the entries it will remove when
// it ends.
func (q *queue) subscribedWith(subs []*subEntry) { q.subs = append(q.subs, subs...) }

// driverListens: the driver's subscription is in place (or failed; the
// re-check covers that).
func (q *queue) driverListens() {
	if q.driver == subscribing {
		q.driver = listening
	}
}

// driverEnds: the driver ends. It returns whether it had subscribed, and
// the entries it added, for it to remove.
func (q *queue) driverEnds() (subscribed bool, mine []*subEntry) {
	subscribed, mine = q.driver != starting, q.subs
	q.driver, q.subs = stopped, nil
	return subscribed, mine
}

// sleepFor is how long the driver sleeps when it has nothing to do:
// until woken, or queued, until the re-check.
func (q *queue) sleepFor() pause {
	if q.state == queued {
		return max(pause(time.Until(q.checkAt)), atOnce)
	}
	return untilWoken
}

// driverStopsAtClose: the Locker is closed; Close withdraws the tickets.
func (q *queue) driverStopsAtClose() { q.driver = stopped }

// wake ends the driver's sleep, or its next one.
func (q *queue) wake() {
	select {
	case q.wakeup <- struct{}{}:
	default:
	}
}

// withdrawn: the driver's withdraw of ticket came back with err.
func (q *queue) withdrawn(ticket string, err error) {
	if err != nil {
		q.lastErr = err
		return
	}
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
func (q *queue) attempted(ticket string, sent time.Time, res core.AcquireResult, err error, failures int) (pause, handOff) {
	if q.state != registering || q.ticket != ticket {
		return atOnce, handOff{} // a grant message got there first, or the ticket was given up
	}
	switch {
	case err != nil:
		// The call may have run, or may still run: never reuse a ticket
		// whose fate is unknown. Withdraw it and start over with a new one.
		q.lastErr = err
		q.dropTicket()
		return pause(q.l.backoff(failures)), handOff{}
	case res.Status == core.Acquired:
		return untilWoken, q.pass(grant{ticket: res.Owner, token: res.Token, deadline: res.Deadline})
	case res.Status == core.PlaceLost, res.Status == core.Withdrawn:
		q.ticket, q.state = "", free // queue again at once, under a new ticket
		return atOnce, handOff{}
	case !res.Queued:
		// Taken, and the backend keeps no place for us (Redlock): try
		// again after the holder's remaining lease, or when woken.
		q.ticket, q.state = "", free
		return pause(q.l.recheckIn(res.RetryIn)), handOff{}
	}
	q.state, q.since = queued, sent
	if q.recheckNow {
		// A grant for the ticket came while the call was on its way, too
		// late in its claim lease to hand out: the re-check takes it while
		// it lasts.
		q.recheckNow = false
		q.checkAt = time.Now()
		return atOnce, handOff{}
	}
	wait := q.l.recheckIn(res.RetryIn)
	q.checkAt = time.Now().Add(wait)
	return pause(wait), handOff{}
}

// ---- Close ----

// close hands Close what it must end: the hold of this process, if any,
// and the tickets to withdraw.
func (q *queue) close() (holder *Hold, tickets []string) {
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
