// Package lease keeps a held lock's lease, the pattern's first open
// problem (the lease ends while the work goes on: post 1 and post 2 in
// docs/lock.md's References): it renews the lease in the background (a
// watchdog, as post 5 describes), and reports its loss at once, through a
// Lost channel and cancelled contexts. It knows nothing of lines of
// waiting processes: the hold it belongs to (a Holder) asks Redis, and is
// told of a loss.
//
// Every Lease of one Keeper, and the Keeper's heap, are guarded by the
// Keeper's one mutex, and this file is the only one that takes it.
package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
)

// ErrLeaseLost is why a lease's Lost channel closed; package lock
// documents it.
var ErrLeaseLost = fmt.Errorf("%w: lease lost", core.ErrNotHeld)

// Observer is told of renewals that failed and leases lost, for metrics.
type Observer interface {
	RenewalFailed(name string, err error)
	LeaseLost(name string)
}

// Config is what the Keeper needs of the lock's options.
type Config struct {
	TTL, RenewInterval time.Duration
	DisableRenewal     bool
	BackoffCap         time.Duration // the longest wait between renewals that failed
	Observer           Observer
}

// Holder is what a Lease asks of the hold it belongs to.
type Holder interface {
	// Renew asks Redis to extend the lease; ok is false when the hold no
	// longer owns the lock.
	Renew(ctx context.Context) (deadline time.Time, ok bool, err error)
	// LeaseLost is told, once, after Lost closed, that the lease was lost
	// with cause while held.
	LeaseLost(cause error)
}

// Keeper keeps the leases of one Locker: every held lease's next event
// (its renewal, or its deadline) in one heap behind one timer. A timer per
// lease would cost a runtime timer insertion on every acquisition, and
// inserting a timer that fires before all others wakes Go's network poller
// with a syscall, both on the path of every uncontended acquire and
// release. This timer is armed for the earliest event and touched only
// when an earlier one arrives; a lease released or rescheduled meanwhile
// just leaves the heap, and an early wake-up re-arms it.
type Keeper struct {
	cfg Config
	ctx context.Context // the owner's: renewals end with it
	// spawn runs fn in a goroutine its owner waits for, and reports
	// false, without running it, once the owner is closing.
	spawn func(fn func()) bool

	mu      sync.Mutex
	heap    leaseHeap
	timer   *time.Timer
	armed   time.Time // when the timer fires; zero when it is not armed
	stopped bool
}

// NewKeeper returns a Keeper whose renewals run in goroutines started by
// spawn and end with ctx.
func NewKeeper(ctx context.Context, cfg Config, spawn func(fn func()) bool) *Keeper {
	return &Keeper{cfg: cfg, ctx: ctx, spawn: spawn}
}

// Lease is one acquisition's lease. The fields after lost are guarded by
// the Keeper's mutex.
type Lease struct {
	k      *Keeper
	holder Holder
	name   string
	lost   chan struct{}

	deadline time.Time // the lease lasts at least until then, on our clock
	released bool
	lostErr  error
	cancels  map[int]context.CancelCauseFunc
	nextID   int
	// While a renewal is in flight the deadline stays scheduled, so that a
	// renewal stuck on the network cannot delay the news of the loss.
	renewAt  time.Time
	renewing bool
	failures int // renewals failed in a row
	// claim: the lease is still a grant's claim lease, shorter than the
	// TTL; the first renewal, started at once, extends it to the TTL, also
	// with renewal disabled.
	claim bool
	at    time.Time // when the watchdog looks next
	index int       // place in the heap, -1 when out
}

// Init prepares l, the lease of a lock just won by holder, not yet
// watched: deadline is a time the lease certainly lasts until (the send
// time of the request that took it, or an earlier bound, plus the lease),
// and claim says it is a grant's claim lease.
func (k *Keeper) Init(l *Lease, holder Holder, name string, deadline time.Time, claim bool) {
	*l = Lease{k: k, holder: holder, name: name, lost: make(chan struct{}), deadline: deadline,
		renewAt: deadline.Add(k.cfg.RenewInterval - k.cfg.TTL), claim: claim, index: -1}
}

// Start puts l under the watchdog, unless it was lost or released
// already; with checkNow, or a claim lease, it renews at once.
func (l *Lease) Start(checkNow bool) {
	k := l.k
	k.mu.Lock()
	if l.released || l.lostErr != nil {
		k.mu.Unlock()
		return
	}
	l.renewing = checkNow || l.claim
	k.schedule(l, l.nextEvent())
	renew := l.renewing
	k.mu.Unlock()
	if renew && !k.spawn(l.renew) {
		k.mu.Lock()
		l.renewing = false
		k.mu.Unlock()
	}
}

// Lost is closed when the lease is lost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is the loss once Lost is closed, nil before.
func (l *Lease) Err() error {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	return l.lostErr
}

// Deadline is the time until which the lease is known to last.
func (l *Lease) Deadline() time.Time {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	return l.deadline
}

// Context returns a copy of parent cancelled, with the loss as its cause,
// when the lease is lost.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancelCause := context.WithCancelCause(parent)
	l.k.mu.Lock()
	if l.lostErr != nil || l.released {
		err := l.lostErr
		if err == nil {
			err = fmt.Errorf("%w: %q was released", core.ErrNotHeld, l.name)
		}
		l.k.mu.Unlock()
		cancelCause(err)
		return ctx, func() { cancelCause(context.Canceled) }
	}
	id := l.nextID
	l.nextID++
	if l.cancels == nil {
		l.cancels = make(map[int]context.CancelCauseFunc)
	}
	l.cancels[id] = cancelCause
	l.k.mu.Unlock()
	return ctx, func() {
		l.k.mu.Lock()
		delete(l.cancels, id)
		l.k.mu.Unlock()
		cancelCause(context.Canceled)
	}
}

// Extend resets the lease to the full TTL now, if the hold still owns the
// lock; otherwise the lease is lost and Extend returns core.ErrNotHeld.
// Once the loss was reported it returns that loss and changes nothing.
func (l *Lease) Extend(ctx context.Context) error {
	l.k.mu.Lock()
	err := l.lostErr
	if l.released {
		err = fmt.Errorf("%w: %q was released", core.ErrNotHeld, l.name)
	}
	l.k.mu.Unlock()
	if err != nil {
		return err
	}
	deadline, ok, err := l.holder.Renew(ctx)
	if err != nil {
		return fmt.Errorf("lock: extend %q: %w", l.name, err)
	}
	if !ok {
		l.Lose(ErrLeaseLost)
		return fmt.Errorf("%w: %q", core.ErrNotHeld, l.name)
	}
	if err := l.Extended(deadline); err != nil {
		return fmt.Errorf("%w: %q", err, l.name)
	}
	return nil
}

// Extended moves the deadline forward to d (never back): the lease now
// runs for the full TTL. Once the loss was reported it changes nothing and
// returns the loss: the extension may have reached Redis in time, but the
// holder was already told to stop, and another process may have taken
// the lock between the deadline and the extension.
func (l *Lease) Extended(d time.Time) error {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	if l.lostErr != nil {
		return l.lostErr
	}
	if d.After(l.deadline) {
		l.deadline = d
	}
	l.claim = false
	return nil
}

// Ending is what a release knows of its lease before its call to Redis.
type Ending struct {
	Reported bool      // the loss was reported before the release began
	LostErr  error     // the loss, reported or found now (the deadline passed)
	Deadline time.Time // the lease's deadline
	Claim    bool      // the lease is still a claim lease
}

// End marks l released, takes it from the watchdog and cancels its
// contexts: the part of a release before its call, which begins at now
// (the caller's clock reading, which it also uses for the call). A second
// End is core.ErrNotHeld.
func (l *Lease) End(now time.Time) (Ending, error) {
	k := l.k
	k.mu.Lock()
	if l.released {
		k.mu.Unlock()
		return Ending{}, fmt.Errorf("%w: %q was already released", core.ErrNotHeld, l.name)
	}
	l.released = true
	e := Ending{Reported: l.lostErr != nil, LostErr: l.lostErr, Deadline: l.deadline, Claim: l.claim}
	k.remove(l)
	// A renewal already in flight may still land: before the release
	// script it extends a lease about to be deleted; after it, it finds no
	// owner and, the lease being released, reports nothing.
	if e.LostErr == nil && !now.Before(l.deadline) {
		e.LostErr = ErrLeaseLost // ran out; the watchdog had not noticed yet
	}
	cancels := l.cancels
	l.cancels = nil
	k.mu.Unlock()
	for _, c := range cancels {
		c(context.Canceled)
	}
	return e, nil
}

// Finish reports what the release's call found (released, err) and
// returns Release's error. A loss the release found, not reported before,
// is counted and closes Lost here.
func (l *Lease) Finish(e Ending, released bool, err error) error {
	lostErr := e.LostErr
	if lostErr == nil && err == nil && !released {
		// The key was already gone or someone else's, or (passed on within
		// the process) a check after the hand-off found it so.
		lostErr = ErrLeaseLost
	}
	if !e.Reported && lostErr != nil {
		l.k.cfg.Observer.LeaseLost(l.name)
		l.k.mu.Lock()
		if l.lostErr == nil {
			l.lostErr = lostErr
			close(l.lost)
		}
		l.k.mu.Unlock()
	}
	switch {
	case lostErr != nil:
		return fmt.Errorf("%w: %q", lostErr, l.name)
	case err != nil:
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	}
	return nil
}

// Lose marks the lease lost, once, unless it was released: close Lost,
// cancel derived contexts, and tell the holder.
func (l *Lease) Lose(cause error) {
	k := l.k
	k.mu.Lock()
	if l.lostErr != nil || l.released {
		k.mu.Unlock()
		return
	}
	l.lostErr = cause
	k.remove(l)
	cancels := l.cancels
	l.cancels = nil
	k.mu.Unlock()
	// Contexts first, and the loss counted: whoever wakes on Lost must
	// find them cancelled, and the loss in the metrics, too.
	for _, c := range cancels {
		c(cause)
	}
	k.cfg.Observer.LeaseLost(l.name)
	close(l.lost)
	l.holder.LeaseLost(cause)
}

// nextEvent is when the watchdog should next look at l: its renewal, or
// its deadline if that comes first, if renewal is off, or while a renewal
// is in flight. Caller holds k.mu.
func (l *Lease) nextEvent() time.Time {
	if !l.renews() || l.renewing || l.deadline.Before(l.renewAt) {
		return l.deadline
	}
	return l.renewAt
}

// renews reports whether the watchdog renews l: with renewal on, and
// until a claim lease is extended to the TTL in any case. Caller holds
// k.mu.
func (l *Lease) renews() bool { return !l.k.cfg.DisableRenewal || l.claim }

// due is called by the watchdog when l's time has come. At the deadline
// (unless a renewal moved it meanwhile), the lease is lost, whatever a
// renewal in flight may still bring: being told at once matters more than
// the renewal itself, since a holder that keeps writing after its lease
// ended breaks mutual exclusion. At the renewal time, it starts a
// renewal.
func (l *Lease) due() {
	k := l.k
	k.mu.Lock()
	if l.released || l.lostErr != nil {
		k.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(l.deadline) {
		k.mu.Unlock()
		l.Lose(ErrLeaseLost)
		return
	}
	if !l.renews() || l.renewing || now.Before(l.renewAt) {
		k.schedule(l, l.nextEvent()) // early: the deadline moved
		k.mu.Unlock()
		return
	}
	l.renewing = true
	k.schedule(l, l.deadline)
	k.mu.Unlock()
	if !k.spawn(l.renew) {
		k.mu.Lock()
		l.renewing = false
		k.mu.Unlock()
	}
}

// renew is the watchdog's renewal: it extends the lease, and after a
// failure tries again with backoff until the deadline. A renewal that
// finds another owner declares the loss (in Extend).
func (l *Lease) renew() {
	k := l.k
	ctx, cancel := context.WithDeadline(k.ctx, l.Deadline())
	err := l.Extend(ctx)
	cancel()

	k.mu.Lock()
	l.renewing = false
	if l.released || l.lostErr != nil {
		k.mu.Unlock()
		return
	}
	if err != nil {
		l.failures++
		l.renewAt = time.Now().Add(Backoff(l.failures, k.cfg.BackoffCap))
	} else {
		l.failures = 0
		l.renewAt = l.deadline.Add(k.cfg.RenewInterval - k.cfg.TTL)
	}
	k.schedule(l, l.nextEvent())
	k.mu.Unlock()
	if err != nil {
		k.cfg.Observer.RenewalFailed(l.name, err)
	}
}

// schedule makes at the time l is next looked at. Caller holds k.mu.
func (k *Keeper) schedule(l *Lease, at time.Time) {
	if k.stopped {
		return
	}
	l.at = at
	if l.index >= 0 {
		k.heap.fix(l.index)
	} else {
		k.heap.push(l)
	}
	if k.armed.IsZero() || at.Before(k.armed) {
		k.arm(at)
	}
}

// remove takes l out of the heap; the timer stays as it is. Caller holds
// k.mu.
func (k *Keeper) remove(l *Lease) {
	if l.index >= 0 {
		k.heap.remove(l.index)
	}
}

// arm sets the timer for at. Caller holds k.mu.
func (k *Keeper) arm(at time.Time) {
	k.armed = at
	if k.timer == nil {
		k.timer = time.AfterFunc(time.Until(at), func() { k.spawn(k.fire) })
		return
	}
	k.timer.Reset(time.Until(at))
}

// fire hands the leases whose time has come to due, and re-arms for the
// next one.
func (k *Keeper) fire() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.armed = time.Time{}
	now := time.Now()
	var due []*Lease
	for len(k.heap) > 0 && !k.heap[0].at.After(now) {
		due = append(due, k.heap.pop())
	}
	if len(k.heap) > 0 {
		k.arm(k.heap[0].at)
	}
	k.mu.Unlock()
	for _, l := range due {
		l.due()
	}
}

// Stop disarms the timer for good: the owner is closing.
func (k *Keeper) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
	k.armed = time.Time{}
	k.heap = nil
}
