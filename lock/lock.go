package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is one acquisition of a named lock: its owner UUID, its fencing
// token, and its lease. While it is held, a watchdog timer renews the
// lease (unless renewal is disabled) and closes Lost the moment the lease
// can no longer be vouched for. A Lock is safe for concurrent use.
type Lock struct {
	locker   *Locker
	name     string
	k        keys
	owner    string
	token    int64
	last     int64 // the last token reserved for this run of holds (grant.last)
	run      *run  // the run of holds this Lock belongs to; nil without reserved tokens
	acquired time.Time

	mu       sync.Mutex
	deadline time.Time // the lease lasts at least until then, on our clock
	released bool
	lostErr  error
	lost     chan struct{}
	cancels  map[int]context.CancelCauseFunc
	nextID   int

	// The Locker's watchdog looks at the Lock at its next renewal, or at
	// its deadline if that comes first. While a renewal is in flight the
	// deadline stays scheduled, so that a renewal stuck on the network
	// cannot delay the news of the loss.
	renewAt  time.Time
	renewing bool
	failures int // renewals failed in a row
	// claim: the lease is still a grant's claim lease, shorter than the
	// TTL. The first renewal, started at once, extends it to the TTL, also
	// with renewal disabled.
	claim bool

	at    time.Time // when the watchdog looks next; guarded by watchdog.mu
	index int       // place in the watchdog's heap, -1 when out; guarded by watchdog.mu
}

// newLock starts the watchdog of a lock just won for g.ticket. g.deadline
// is a time the lease certainly lasts until: the send time of the request
// that took it (or an earlier bound) plus the lease. A claim lease is
// extended at once, and so is the lease of a Lock passed on within the
// process (g.run), to check that the key is still the run's. Caller holds
// Locker.mu, and the Locker is not closed.
func (l *Locker) newLock(q *queue, g grant) *Lock {
	check := g.claim || g.run != nil
	lk := &Lock{
		locker:   l,
		name:     q.name,
		k:        q.k,
		owner:    g.ticket,
		token:    g.token,
		last:     g.last,
		run:      g.run,
		acquired: time.Now(),
		deadline: g.deadline,
		lost:     make(chan struct{}),
		renewAt:  g.deadline.Add(l.opts.RenewInterval - l.opts.TTL),
		claim:    g.claim,
		renewing: check,
		index:    -1,
	}
	if lk.run == nil && g.last > g.token {
		lk.run = &run{} // it may be passed on
	}
	lk.mu.Lock()
	l.dog.schedule(lk, lk.nextEvent())
	lk.mu.Unlock()
	if check {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			lk.renew()
		}()
	}
	return lk
}

// Name is the lock's name.
func (lk *Lock) Name() string { return lk.name }

// Owner is the UUID stored as the lock's value: fresh for every acquisition
// from Redis, so that only this acquisition can release or extend it
// (without it, a holder whose lease expired deletes its successor's lock:
// antipattern.PlainDelete). A Lock passed to it by another goroutine of
// the same Locker, without a release in Redis (see Release), keeps its
// predecessor's owner, as the key does; its token is its own.
func (lk *Lock) Owner() string { return lk.owner }

// Token is the fencing token of this acquisition: larger than the token of
// every earlier acquisition of the same lock. That holds also when Redis
// lost the counter or brought back an older one (a restart without
// persistence or from a stale snapshot, a failover to a lagging replica),
// under one clock assumption: the token is the server's clock in
// microseconds unless the counter is ahead, so the server that issues the
// first token after the loss must have a clock that reads later than the
// issuer of the last token's did then (clocks that differ by less than
// the restart or failover took). Pass it to the resource the lock protects
// and have the resource refuse writes carrying a smaller token than it has
// seen: that, not the lease, is what keeps a holder that stalled past its
// lease from writing (Kleppmann, "How to do distributed locking").
func (lk *Lock) Token() int64 { return lk.token }

// Lost is closed when the lease is lost: a renewal found another owner or
// none, or the lease ran out before a renewal succeeded (or, with renewal
// disabled, simply ran out), or Release found it lost. After that, other
// processes may hold the lock.
func (lk *Lock) Lost() <-chan struct{} { return lk.lost }

// Err is ErrLeaseLost (or ErrClosed) once Lost is closed, nil before.
func (lk *Lock) Err() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.lostErr
}

// Deadline is the time until which the lease is known to last, on this
// process's clock. It moves forward with every renewal.
func (lk *Lock) Deadline() time.Time {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.deadline
}

// Context returns a copy of parent that is cancelled, with cause
// ErrLeaseLost, when the lease is lost. Call cancel when done with it.
func (lk *Lock) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancelCause := context.WithCancelCause(parent)
	lk.mu.Lock()
	if lk.lostErr != nil || lk.released {
		err := lk.lostErr
		if err == nil {
			err = fmt.Errorf("%w: %q was released", ErrNotHeld, lk.name)
		}
		lk.mu.Unlock()
		cancelCause(err)
		return ctx, func() { cancelCause(context.Canceled) }
	}
	id := lk.nextID
	lk.nextID++
	if lk.cancels == nil {
		lk.cancels = make(map[int]context.CancelCauseFunc)
	}
	lk.cancels[id] = cancelCause
	lk.mu.Unlock()
	return ctx, func() {
		lk.mu.Lock()
		delete(lk.cancels, id)
		lk.mu.Unlock()
		cancelCause(context.Canceled)
	}
}

// Extend resets the lease to the full TTL now, if this acquisition still
// owns the lock; otherwise it returns ErrNotHeld and changes nothing. Once
// the loss was reported (Lost is closed), it returns that loss
// (ErrLeaseLost, ErrClosed) and Deadline stays put, also when the extension
// reached Redis: the key then stays until Release deletes it or its TTL
// runs out. It is what the watchdog calls; call it yourself when renewal is
// disabled.
func (lk *Lock) Extend(ctx context.Context) error {
	lk.mu.Lock()
	err := lk.lostErr
	if lk.released {
		err = fmt.Errorf("%w: %q was released", ErrNotHeld, lk.name)
	}
	lk.mu.Unlock()
	if err != nil {
		return err
	}
	sent := time.Now()
	deadline, ok, err := lk.locker.backend.extend(ctx, lk.k, lk.owner)
	if err != nil {
		return fmt.Errorf("lock: extend %q: %w", lk.name, err)
	}
	if !ok {
		if lk.run != nil {
			lk.locker.foundLost(lk.run, lk.name)
		}
		lk.lose(ErrLeaseLost)
		return fmt.Errorf("%w: %q", ErrNotHeld, lk.name)
	}
	if lk.run != nil {
		lk.locker.confirmed(lk.run, sent)
	}
	if err := lk.extended(deadline); err != nil {
		return fmt.Errorf("%w: %q", err, lk.name)
	}
	return nil
}

// extended moves the lease's deadline forward to d (never back): the lease
// now runs for the full TTL. Once the loss was reported it changes nothing
// and returns the loss: the extension may have reached Redis in time, but
// the holder was already told to stop, and another process may have taken
// the lock between the deadline and the extension.
func (lk *Lock) extended(d time.Time) error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.lostErr != nil {
		return lk.lostErr
	}
	if d.After(lk.deadline) {
		lk.deadline = d
	}
	lk.claim = false
	return nil
}

// Release deletes the lock if this acquisition still owns it (compare and
// delete in one script: a plain DEL, or GET then DEL, deletes a successor's
// lock; see antipattern.PlainDelete and GetThenDelete) and hands it to the
// next waiter in the same script. Releasing twice returns ErrNotHeld.
//
// Release returns nil only if a check of the key after the hold found it
// still this acquisition's: the critical section was exclusive. It returns
// ErrLeaseLost, and closes Lost, if the lease was lost while the Lock was
// held, also when the Lock never noticed: the key was gone or someone
// else's when the release reached Redis, or the lease ran out first. When
// the lock passes to another goroutine of this Locker without a release in
// Redis, the check is that goroutine's Lock renewing its lease at once, and
// Release waits for it; if no check can answer (ctx ends, Close, the run's
// last release fails), it returns an error saying the hold was not checked.
func (lk *Lock) Release(ctx context.Context) error {
	r, err := lk.startRelease()
	if err != nil {
		return err
	}
	released, err := lk.locker.release(ctx, lk)
	return lk.endRelease(r, released, err)
}

// releaseBegun is what a Release knows of its Lock before its call to Redis:
// whether the loss was already reported, and the loss it found.
type releaseBegun struct {
	reported bool
	lostErr  error
}

// startRelease marks lk released and stops its renewals and contexts: the
// part of Release before the call to Redis. A second release is
// ErrNotHeld.
func (lk *Lock) startRelease() (releaseBegun, error) {
	lk.mu.Lock()
	if lk.released {
		lk.mu.Unlock()
		return releaseBegun{}, fmt.Errorf("%w: %q was already released", ErrNotHeld, lk.name)
	}
	lk.released = true
	r := releaseBegun{reported: lk.lostErr != nil, lostErr: lk.lostErr}
	lk.locker.dog.remove(lk)
	// A renewal already in flight may still land: before the release
	// script it extends a lease about to be deleted, after it it finds no
	// owner and, the Lock being released, reports nothing.
	if r.lostErr == nil && !time.Now().Before(lk.deadline) {
		r.lostErr = ErrLeaseLost // ran out; the watchdog had not noticed yet
	}
	cancels := lk.cancels
	lk.cancels = nil
	lk.mu.Unlock()
	for _, c := range cancels {
		c(context.Canceled)
	}
	return r, nil
}

// endRelease reports what the release's call found (released, err): the
// part of Release after it.
func (lk *Lock) endRelease(r releaseBegun, released bool, err error) error {
	obs := lk.locker.opts.Observer
	held := time.Since(lk.acquired)
	lostErr := r.lostErr
	if lostErr == nil && err == nil && !released {
		// The key was already gone or someone else's, or (passed on
		// within the process) a check after the hand-off found it so.
		lostErr = ErrLeaseLost
	}
	if !r.reported && lostErr != nil {
		// Lost, and found out only now: the deadline passed before the
		// watchdog looked, or the key was not ours any more. lose was
		// never called: count the loss, and close Lost, here.
		obs.LeaseLost(lk.name)
		lk.lostAtRelease(lostErr)
	}
	// After the loss, so that metrics which show the hold over show its
	// loss too.
	obs.Released(lk.name, held)
	switch {
	case lostErr != nil:
		return fmt.Errorf("%w: %q", lostErr, lk.name)
	case err != nil:
		return fmt.Errorf("lock: release %q: %w", lk.name, err)
	}
	return nil
}

// lostAtRelease records a loss that Release found: Lost closes and Err
// reports it, as they would had the watchdog found it first.
func (lk *Lock) lostAtRelease(cause error) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.lostErr == nil {
		lk.lostErr = cause
		close(lk.lost)
	}
}

// nextEvent is when the watchdog should next look at lk: its renewal, or
// its deadline if that comes first, if renewal is off, or while a renewal
// is in flight. Caller holds lk.mu.
func (lk *Lock) nextEvent() time.Time {
	if !lk.renews() || lk.renewing || lk.deadline.Before(lk.renewAt) {
		return lk.deadline
	}
	return lk.renewAt
}

// renews reports whether the watchdog renews lk: with renewal on, and
// until a claim lease is extended to the TTL in any case. Caller holds
// lk.mu.
func (lk *Lock) renews() bool { return !lk.locker.opts.DisableRenewal || lk.claim }

// due is called by the watchdog when lk's time has come. At the deadline
// (unless a renewal moved it meanwhile), the lease is lost, whatever a
// renewal in flight may still bring: being told at once matters more than
// the renewal itself, since a holder that keeps writing after its lease
// ended breaks mutual exclusion. At the renewal time, it starts a
// renewal.
func (lk *Lock) due() {
	lk.mu.Lock()
	if lk.released || lk.lostErr != nil {
		lk.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(lk.deadline) {
		lk.mu.Unlock()
		lk.lose(ErrLeaseLost)
		return
	}
	if !lk.renews() || lk.renewing || now.Before(lk.renewAt) {
		lk.locker.dog.schedule(lk, lk.nextEvent()) // early: the deadline moved
		lk.mu.Unlock()
		return
	}
	lk.renewing = true
	lk.locker.dog.schedule(lk, lk.deadline)
	lk.mu.Unlock()
	lk.locker.goTracked(lk.renew)
}

// renew is the watchdog's renewal: it extends the lease, and after a
// failure tries again with backoff until the deadline. A renewal that
// finds another owner declares the loss (in Extend).
func (lk *Lock) renew() {
	l := lk.locker
	deadline := lk.Deadline()
	ctx, cancel := context.WithDeadline(l.ctx, deadline)
	err := lk.Extend(ctx)
	cancel()

	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.renewing = false
	if lk.released || lk.lostErr != nil {
		return
	}
	if err != nil {
		l.opts.Observer.RenewalFailed(lk.name, err)
		lk.failures++
		lk.renewAt = time.Now().Add(l.backoff(lk.failures))
	} else {
		lk.failures = 0
		lk.renewAt = lk.deadline.Add(l.opts.RenewInterval - l.opts.TTL)
	}
	l.dog.schedule(lk, lk.nextEvent())
}

// lose marks the lease lost, once: close Lost, cancel derived contexts, and
// let this process's other waiters contend for the lock.
func (lk *Lock) lose(cause error) {
	lk.mu.Lock()
	if lk.lostErr != nil || lk.released {
		lk.mu.Unlock()
		return
	}
	lk.lostErr = cause
	lk.locker.dog.remove(lk)
	cancels := lk.cancels
	lk.cancels = nil
	lk.mu.Unlock()
	// Contexts first, and the loss counted: whoever wakes on Lost must find
	// them cancelled, and the loss in the metrics, too.
	for _, c := range cancels {
		c(cause)
	}
	lk.locker.opts.Observer.LeaseLost(lk.name)
	close(lk.lost)
	lk.locker.leaseEnded(lk, cause)
}
