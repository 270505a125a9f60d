package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is one acquisition of a named lock: its owner UUID, its fencing
// token, and its lease. While it is held, a watchdog goroutine renews the
// lease (unless renewal is disabled) and closes Lost the moment the lease
// can no longer be vouched for. A Lock is safe for concurrent use.
type Lock struct {
	l        *Locker
	name     string
	k        keys
	owner    string
	token    int64
	acquired time.Time

	mu       sync.Mutex
	deadline time.Time // the lease lasts at least until then, on our clock
	released bool
	lostErr  error
	lost     chan struct{}
	cancels  map[int]context.CancelCauseFunc
	nextID   int

	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// newLock starts the watchdog of a lock just won. deadline is a time the
// lease certainly lasts until: the send time of the request that took it
// (or an earlier bound) plus the lease. Caller holds Locker.mu.
func (l *Locker) newLock(name, owner string, token int64, deadline time.Time) *Lock {
	ctx, stop := context.WithCancel(l.ctx)
	lk := &Lock{
		l:         l,
		name:      name,
		k:         newKeys(l.opts.Prefix, name),
		owner:     owner,
		token:     token,
		acquired:  time.Now(),
		deadline:  deadline,
		lost:      make(chan struct{}),
		cancels:   make(map[int]context.CancelCauseFunc),
		stopWatch: stop,
		watchDone: make(chan struct{}),
	}
	l.wg.Add(1)
	go lk.watch(ctx)
	return lk
}

// Name is the lock's name.
func (lk *Lock) Name() string { return lk.name }

// Owner is the UUID stored as the lock's value: fresh for every
// acquisition, so that only this acquisition can release or extend it
// (seed 002: without it, a holder whose lease expired deletes its
// successor's lock).
func (lk *Lock) Owner() string { return lk.owner }

// Token is the fencing token of this acquisition: larger than the token of
// every earlier acquisition of the same lock, also across a Redis restart
// that lost the counter. Pass it to the resource the lock protects and have
// the resource refuse writes carrying a smaller token than it has seen: that,
// not the lease, is what keeps a holder that stalled past its lease from
// writing (Kleppmann, "How to do distributed locking").
func (lk *Lock) Token() int64 { return lk.token }

// Lost is closed when the lease is lost: a renewal found another owner or
// none, or the lease ran out before a renewal succeeded (or, with renewal
// disabled, simply ran out). After that, other processes may hold the lock.
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
	if lk.lostErr != nil {
		err := lk.lostErr
		lk.mu.Unlock()
		cancelCause(err)
		return ctx, func() { cancelCause(context.Canceled) }
	}
	id := lk.nextID
	lk.nextID++
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
// owns the lock; otherwise it returns ErrNotHeld and changes nothing. It is
// what the watchdog calls; call it yourself when renewal is disabled.
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
	ok, err := lk.l.runExtend(ctx, lk.k, lk.owner)
	if err != nil {
		return fmt.Errorf("lock: extend %q: %w", lk.name, err)
	}
	if !ok {
		lk.lose(ErrLeaseLost)
		return fmt.Errorf("%w: %q", ErrNotHeld, lk.name)
	}
	lk.mu.Lock()
	if d := sent.Add(lk.l.opts.TTL); d.After(lk.deadline) {
		lk.deadline = d
	}
	lk.mu.Unlock()
	return nil
}

// Release deletes the lock if this acquisition still owns it (compare and
// delete in one script: seed 000's wrong unlocks, plain DEL and GET-then-DEL,
// delete a successor's lock) and hands it to the next waiter in the same
// script. It returns ErrNotHeld if the lock was no longer ours, and
// ErrLeaseLost if the lease was lost while held, even if the key happened to
// still be ours: the critical section was not guaranteed to be exclusive.
// Releasing twice returns ErrNotHeld.
func (lk *Lock) Release(ctx context.Context) error {
	lk.mu.Lock()
	if lk.released {
		lk.mu.Unlock()
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, lk.name)
	}
	lk.released = true
	lk.mu.Unlock()

	lk.stopWatch()
	<-lk.watchDone

	lk.mu.Lock()
	lostErr := lk.lostErr
	if lostErr == nil && !time.Now().Before(lk.deadline) {
		lostErr = ErrLeaseLost // ran out; the watchdog had not noticed yet
	}
	cancels := lk.cancels
	lk.cancels = nil
	lk.mu.Unlock()
	for _, c := range cancels {
		c(context.Canceled)
	}

	released, err := lk.l.release(ctx, lk)
	lk.l.opts.Observer.Released(lk.name, time.Since(lk.acquired))
	switch {
	case lostErr != nil:
		return fmt.Errorf("%w: %q", lostErr, lk.name)
	case err != nil:
		return fmt.Errorf("lock: release %q: %w", lk.name, err)
	case !released:
		return fmt.Errorf("%w: %q", ErrNotHeld, lk.name)
	}
	return nil
}

// watch is the lock's watchdog. With renewal on, it extends the lease every
// RenewInterval; a failed renewal is retried until the lease runs out. It
// declares the lease lost when a renewal finds another owner, or when the
// deadline passes without a successful renewal. Being told at once matters
// more than the renewal itself: a holder that keeps writing after its lease
// ended is seed 000's open problem.
func (lk *Lock) watch(ctx context.Context) {
	defer lk.l.wg.Done()
	defer close(lk.watchDone)
	opts := lk.l.opts
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for {
		deadline := lk.Deadline()
		next := deadline
		if !opts.DisableRenewal {
			next = deadline.Add(-opts.TTL).Add(opts.RenewInterval)
			if failures > 0 {
				next = time.Now().Add(lk.l.backoff(failures))
			}
			if next.After(deadline) {
				next = deadline
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			if lk.l.ctx.Err() != nil {
				lk.lose(ErrClosed)
			}
			return
		case <-timer.C:
		}
		if opts.DisableRenewal || !time.Now().Before(lk.Deadline()) {
			if !time.Now().Before(lk.Deadline()) {
				lk.lose(ErrLeaseLost)
				return
			}
			continue
		}
		rctx, cancel := context.WithDeadline(ctx, lk.Deadline())
		err := lk.Extend(rctx)
		cancel()
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
			continue // released or closed meanwhile; the select above returns
		default:
			opts.Observer.RenewalFailed(lk.name, err)
			if lk.Err() != nil {
				return // Extend found another owner and declared the loss
			}
			failures++
		}
	}
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
	close(lk.lost)
	cancels := lk.cancels
	lk.cancels = make(map[int]context.CancelCauseFunc)
	lk.mu.Unlock()
	for _, c := range cancels {
		c(cause)
	}
	lk.l.opts.Observer.LeaseLost(lk.name)
	lk.l.leaseEnded(lk)
}
