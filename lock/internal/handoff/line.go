package handoff

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/seckill-ref/seckill/lock/internal/backend"
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
)

// line is this process's state for one lock name: which of its goroutines
// hold or wait for the lock, in arrival order, where the process stands in
// the lock's line in Redis, and the life of its driver (the goroutine that
// gets the lock from Redis for the waiting goroutines, driver.go).
//
// It is a state machine guarded by its own mutex. Each event is one
// method, here (goroutines arrive, leave, and get the lock), in turn.go (a
// hold ends) or in driver.go (the driver's steps, and the messages on the
// lock's channel): it takes the mutex, moves the line between states,
// calls tend, and returns what the caller does next, outside the mutex: a
// call to Redis, a wait. A hold handed to a waiting goroutine is delivered
// after the mutex is released (handOff). No event calls Redis while it
// holds the mutex, and the only other mutex it takes inside is the
// Locker's, to start a driver or to forget the line (shared.spawn,
// shared.forget). This file declares the types that
// refer to each other; the others only use them.
type line struct {
	sh *shared
	k  queue.Keys

	mu    sync.Mutex
	state state
	gone  bool // forgotten: idle, and no longer the Locker's line for the name

	waiters []*waiter // oldest first
	holder  *Hold     // held, releasing: the hold of this process

	// ticket is the UUID the process stands in Redis's line under, or is
	// being put there under (releasing, joining, queued). A grant message
	// for any other ticket is stale. Releasing without a ticket to queue
	// under leaves it "".
	ticket string
	// since is no later than any grant to ticket can have been made: the
	// ticket's creation, then the send time of each call that found it
	// still waiting. A grant's claim lasts at least until since plus the
	// claim lease.
	since time.Time
	// checkAt (queued) is when the driver asks Redis itself (the
	// re-check), if no grant has come by then.
	checkAt time.Time
	// recheckNow (releasing, joining): a grant to ticket came while the
	// call putting the process in line was under way, too late in its
	// claim to hand out; the re-check is due as soon as the call returns.
	recheckNow bool
	// withdrawing are tickets for the driver to withdraw: nobody here
	// wants them any more, or a call carrying one got no reply. None is
	// ticket, so a grant for one is stale; the withdraw passes it on.
	withdrawing []string

	driver  driverState
	wakeup  chan struct{} // wakes the driver; capacity 1
	lastErr error         // the driver's last Redis error, for the waiters' error
}

// state is where the process stands for one lock.
type state int

const (
	// free: no hold of this process, and it stands in no line in Redis.
	// With waiters, the driver puts it in line.
	free state = iota
	// trying: the first goroutine's direct attempt is under way; those
	// that arrive meanwhile wait behind it.
	trying
	// held: holder holds the lock.
	held
	// releasing: holder's release is under way; with ticket set, it also
	// puts the process back in line under it, for its waiters.
	releasing
	// joining: the driver's call putting the process in line under ticket,
	// or refreshing its place, is under way.
	joining
	// queued: the process stands in Redis's line under ticket, and waits
	// for a grant message, or the re-check at checkAt.
	queued
)

func (s state) String() string {
	return [...]string{"free", "trying", "held", "releasing", "joining", "queued"}[s]
}

// driverState is the life of the line's driver.
type driverState int

const (
	stopped     driverState = iota
	starting                // running, not yet listening on the lock's channel
	subscribing             // its listeners are being set up
	listening               // a grant published from now on reaches this process
)

type waiter struct {
	ch chan *Hold // capacity 1: receives the lock when it is handed to it
}

// grant is a lock won for a ticket of this process, not yet handed to a
// goroutine.
type grant struct {
	ticket string
	token  int64
	// last is the last fencing token reserved with token (0: none): the
	// tokens after token up to last go with the lock's hand-offs in memory
	// (turn.go, passHeld), under the same owner.
	last     int64
	deadline time.Time // the lease lasts at least until then
	// claim: the lease is a grant's claim, shorter than the TTL; the hold
	// extends it at once (queue's line.lua, grant_lease, says why).
	claim bool
	// run: the lock is handed on in memory, without Redis, in this run of
	// holds under one owner; the hold renews at once, to check that the
	// key is still the run's.
	run *run
	// direct: taken directly (core's acquire), not through the line.
	direct bool
}

// handOff is a hold handed to a waiting goroutine, delivered once the
// event that made it has released the mutex: the goroutine gets it, then
// its lease starts. In that order the renewal that start spawns at once
// (the check of a hold handed on in memory, the extension of a claim) is
// the goroutine the scheduler runs next, so it is sent while the new holder
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

// shared is what the lines of one Locker share.
type shared struct {
	cfg     Config
	backend backend.Backend
	keeper  *lease.Keeper
	id      string      // this process's id in the locks' lines in Redis
	closed  atomic.Bool // Close has begun
	// spawn runs a line's driver in a goroutine the Locker waits for, and
	// reports false, without running it, once Close has begun.
	spawn func(*line) bool
	// forget takes an idle line out of the Locker's map.
	forget func(*line)
}

func newLine(sh *shared, k queue.Keys) *line { return &line{sh: sh, k: k} }

// Hold is one holding of a named lock by a goroutine of this process: an
// owner and a fencing token, with its lease (Lost, Err, Deadline, Context,
// Extend). Package lock's Lock is a Hold. Its events are in turn.go.
type Hold struct {
	lease.Lease
	ln       *line
	owner    string
	token    int64
	last     int64     // the last token reserved for this run of holds (grant.last)
	run      *run      // the run of holds this one belongs to; nil without reserved tokens
	acquired time.Time // when it began: its grant was won, or confirmed (Locker.confirm)
	check    bool      // renew at once, to extend a claim or check a run's key
	direct   bool      // taken directly (core's acquire), not through the line
}

// newHold is the hold of a lock won for g.ticket. Its lease starts
// (start) once the event that made it has released the line's mutex.
func newHold(ln *line, g grant) *Hold {
	h := &Hold{ln: ln, owner: g.ticket, token: g.token, last: g.last, run: g.run,
		acquired: time.Now(), check: g.claim || g.run != nil, direct: g.direct}
	if h.run == nil && g.last > g.token {
		h.run = &run{} // it may be handed on
	}
	ln.sh.keeper.Init(&h.Lease, h, ln.k.Name, g.deadline, g.claim)
	return h
}

// Name is the lock's name.
func (h *Hold) Name() string { return h.ln.k.Name }

// Owner is the owner stored as the lock's value.
func (h *Hold) Owner() string { return h.owner }

// Token is the hold's fencing token.
func (h *Hold) Token() int64 { return h.token }

// start puts the hold's lease under the watchdog. A claim is extended at
// once, and so is the lease of a hold handed on within the process, to
// check that the key is still the run's.
func (h *Hold) start() { h.Lease.Start(h.check) }

// tend is called under ln.mu after every event: it starts or wakes the
// driver while the line has work, and forgets the line when nothing is
// left.
func (ln *line) tend() {
	if ln.gone {
		return
	}
	if ln.hasWork() && ln.driver == stopped && !ln.sh.closed.Load() {
		if ln.wakeup == nil {
			ln.wakeup = make(chan struct{}, 1)
		}
		ln.driver = starting
		if !ln.sh.spawn(ln) {
			ln.driver = stopped
		}
	}
	if ln.driver != stopped {
		ln.wake() // also when nothing is left: the driver ends
		return
	}
	if !ln.busy() && len(ln.waiters) == 0 {
		ln.gone = true
		ln.sh.forget(ln)
	}
}

// wake ends the driver's sleep, or its next one.
func (ln *line) wake() {
	select {
	case ln.wakeup <- struct{}{}:
	default:
	}
}

// busy reports whether a goroutine of this process holds the lock or is
// taking it.
func (ln *line) busy() bool { return ln.state == trying || ln.state == held || ln.state == releasing }

// hasWork reports whether the driver has something to do: goroutines
// waiting, a ticket, tickets to withdraw.
func (ln *line) hasWork() bool {
	return len(ln.waiters) > 0 || ln.ticket != "" || len(ln.withdrawing) > 0
}

// newTicket starts a new stand in Redis's line.
func (ln *line) newTicket() string {
	ln.ticket = uuid.NewString()
	ln.since = time.Now()
	ln.recheckNow = false
	return ln.ticket
}

// dropTicket gives the ticket up, for the driver to withdraw, and leaves
// the process free.
func (ln *line) dropTicket() {
	if ln.ticket != "" {
		ln.withdrawing = append(ln.withdrawing, ln.ticket)
	}
	ln.ticket, ln.recheckNow, ln.state = "", false, free
}

// ---- Goroutines arrive and leave ----

// begin: a goroutine wants the lock. With nobody here holding or
// awaiting it, it tries Redis directly (try); otherwise it waits in line
// as w, unless it does not wait. ok is false when the line was forgotten
// meanwhile: ask the Locker for the name's line again.
func (ln *line) begin(wait bool) (w *waiter, try, ok bool, err error) {
	ln.mu.Lock()
	if ln.gone {
		ln.mu.Unlock()
		return nil, false, false, nil
	}
	if ln.state == free && !ln.hasWork() && ln.driver == stopped {
		ln.state = trying
		ln.mu.Unlock()
		return nil, true, true, nil
	}
	if !wait {
		why := "held or awaited in this process"
		if !ln.busy() && len(ln.waiters) == 0 {
			why = "being withdrawn by this process" // a ticket nobody here wants
		}
		ln.mu.Unlock()
		return nil, false, true, fmt.Errorf("%w: %q is %s", core.ErrNotAcquired, ln.k.Name, why)
	}
	w = &waiter{ch: make(chan *Hold, 1)}
	ln.waiters = append(ln.waiters, w)
	ln.tend()
	ln.mu.Unlock()
	return w, false, true, nil
}

// tried: the direct attempt came back with g (nil: the lock is taken, or
// err). It returns the hold won, or the waiter to wait as (the lock was
// taken, and the goroutine waits: first in line, as it came first), or
// why not. A lock won after Close began is to be withdrawn (unwanted).
func (ln *line) tried(g *grant, err error, wait bool) (h *Hold, w *waiter, unwanted string, _ error) {
	ln.mu.Lock()
	ln.state = free
	switch {
	case g != nil && ln.sh.closed.Load() && !ln.sh.cfg.Test.AcquireIgnoresClose:
		// No hold may start after Close began: nothing would renew it or
		// report its loss.
		ln.tend()
		ln.mu.Unlock()
		return nil, nil, g.ticket, ErrClosed
	case g != nil:
		ln.holder, ln.state = newHold(ln, *g), held
		h = ln.holder
		ln.mu.Unlock()
		h.start()
		return h, nil, "", nil
	case err == nil && !wait:
		err = fmt.Errorf("%w: %q is held", core.ErrNotAcquired, ln.k.Name)
	}
	if err != nil {
		ln.tend()
		ln.mu.Unlock()
		return nil, nil, "", err
	}
	w = &waiter{ch: make(chan *Hold, 1)}
	ln.waiters = slices.Insert(ln.waiters, 0, w)
	ln.tend()
	ln.mu.Unlock()
	return nil, w, "", nil
}

// leave: w's wait ended. removed is false if the lock was handed to it
// already; lastErr is the driver's last Redis error.
func (ln *line) leave(w *waiter) (removed bool, lastErr error) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if i := slices.Index(ln.waiters, w); i >= 0 {
		ln.waiters = slices.Delete(ln.waiters, i, i+1)
		removed = true
	}
	ln.tend()
	return removed, ln.lastErr
}

// ---- Handing the lock to a goroutine ----

// pass gives a lock won for g.ticket to the oldest waiting goroutine. With
// none (their waits ended), the driver withdraws the ticket, which passes
// the lock on; a release under way decides the state. A grant whose
// claim has too little left to count on its extension landing in time (the
// process was paused, or the message was slow) is left to the re-check
// instead (recheckSoon), which takes it with the full lease.
func (ln *line) pass(g grant) handOff {
	switch {
	case g.claim && time.Until(g.deadline) < ln.sh.cfg.ClaimLease/2:
		ln.recheckSoon(g.ticket)
	case len(ln.waiters) == 0 && ln.state == releasing:
		ln.withdrawing = append(ln.withdrawing, g.ticket)
		ln.ticket, ln.recheckNow = "", false
	case len(ln.waiters) == 0:
		ln.ticket = g.ticket
		ln.dropTicket()
	default:
		return ln.handTo(g)
	}
	return handOff{}
}

// recheckSoon: the re-check, due at once, takes a grant to ticket whose
// claim is nearly over: the wait script extends it to the full lease if it
// is still the ticket's, and finds the place gone otherwise. With a call
// putting the process in line under way, its reply decides what comes
// next.
func (ln *line) recheckSoon(ticket string) {
	ln.ticket = ticket
	if ln.state == releasing || ln.state == joining {
		ln.recheckNow = true
		return
	}
	ln.state, ln.checkAt = queued, time.Now()
}

// handTo gives the lock to the oldest waiting goroutine.
func (ln *line) handTo(g grant) handOff {
	w := ln.waiters[0]
	ln.waiters = ln.waiters[1:]
	ln.ticket, ln.recheckNow = "", false
	ln.holder, ln.state = newHold(ln, g), held
	return handOff{w, ln.holder}
}
