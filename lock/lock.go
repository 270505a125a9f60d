package lock

import (
	"context"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/handoff"
)

// Lock is one acquisition of a named lock: its owner UUID, its fencing
// token, and its lease. While it is held, a watchdog timer renews the
// lease (unless renewal is disabled) and closes Lost the moment the lease
// can no longer be vouched for. A Lock is safe for concurrent use.
type Lock struct {
	locker *Locker
	h      *handoff.Hold // the hold, with its lease
}

// Name is the lock's name.
func (lk *Lock) Name() string { return lk.h.Name() }

// Owner is the UUID stored as the lock's value: fresh for every acquisition
// from Redis, so that only this acquisition can release or extend it
// (without it, a holder whose lease expired deletes its successor's lock:
// antipattern.PlainDelete). A Lock passed to it by another goroutine of
// the same Locker, without a release in Redis (see Release), keeps its
// predecessor's owner, as the key does; its token is its own.
func (lk *Lock) Owner() string { return lk.h.Owner() }

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
func (lk *Lock) Token() int64 { return lk.h.Token() }

// Lost is closed when the lease is lost: a renewal found another owner or
// none, or the lease ran out before a renewal succeeded (or, with renewal
// disabled, simply ran out), or Release found it lost. After that, other
// processes may hold the lock.
func (lk *Lock) Lost() <-chan struct{} { return lk.h.Lost() }

// Err is ErrLeaseLost (or ErrClosed) once Lost is closed, nil before.
func (lk *Lock) Err() error { return lk.h.Err() }

// Deadline is the time until which the lease is known to last, on this
// process's clock. It moves forward with every renewal.
func (lk *Lock) Deadline() time.Time { return lk.h.Deadline() }

// Context returns a copy of parent that is cancelled, with cause
// ErrLeaseLost, when the lease is lost. Call cancel when done with it.
func (lk *Lock) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	return lk.h.Context(parent)
}

// Extend resets the lease to the full TTL now, if this acquisition still
// owns the lock; otherwise it returns ErrNotHeld and changes nothing. Once
// the loss was reported (Lost is closed), it returns that loss
// (ErrLeaseLost, ErrClosed) and Deadline stays put, also when the extension
// reached Redis: the key then stays until Release deletes it or its TTL
// runs out. It is what the watchdog calls; call it yourself when renewal is
// disabled.
func (lk *Lock) Extend(ctx context.Context) error { return lk.h.Extend(ctx) }

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
func (lk *Lock) Release(ctx context.Context) error { return lk.locker.f.Release(ctx, lk.h) }
