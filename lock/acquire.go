package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

func (l *Locker) acquire(ctx context.Context, name string, wait bool) (*Lock, error) {
	start := time.Now()
	lk, contended, err := l.acquireOrWait(ctx, name, wait, start)
	lk, err = l.acquired(ctx, lk, err)
	if err != nil {
		l.opts.Observer.AcquireFailed(name, time.Since(start), err)
		return nil, err
	}
	l.opts.Observer.Acquired(name, time.Since(start), contended)
	return lk, nil
}

// acquired is the last step of every acquisition, lk won (unless err):
// the backend's confirmation, and the Close check. A Lock that fails them
// is released, and not returned.
func (l *Locker) acquired(ctx context.Context, lk *Lock, err error) (*Lock, error) {
	if err != nil {
		return nil, err
	}
	err = l.backend.confirm(ctx, lk)
	if err == nil && l.isClosed() && !hooks.acquireIgnoresClose {
		// Close began while we acquired. It may have told this Lock
		// ErrClosed, or may have run before the Lock existed and then
		// nothing watches its lease: either way the caller must not hold
		// it. (Once Acquire has returned, Close reports through Lost.)
		err = ErrClosed
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = lk.Release(rctx)
		cancel()
		return nil, err
	}
	return lk, nil
}

func (l *Locker) acquireOrWait(ctx context.Context, name string, wait bool, start time.Time) (lk *Lock, contended bool, err error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, false, ErrClosed
	}
	q := l.queues[name]
	if q != nil && !wait {
		why := "held or awaited in this process"
		if !q.busy() && len(q.waiters) == 0 {
			why = "being withdrawn by this process" // a ticket or a grant nobody took
		}
		l.mu.Unlock()
		return nil, false, fmt.Errorf("%w: %q is %s", ErrNotAcquired, name, why)
	}
	front := false
	if q == nil {
		// Nobody here holds or awaits the lock: try Redis directly. While the
		// attempt is in flight, other goroutines queue behind it.
		q = l.newQueue(name)
		q.tryStart()
		l.mu.Unlock()

		g, err := l.tryOnce(ctx, q)

		l.mu.Lock()
		if g != nil && l.closed && !hooks.acquireIgnoresClose {
			// Close began while we asked: no Lock may start after it
			// (nothing would renew it or report its loss). Withdraw it.
			q.tried(nil)
			l.tend(q)
			l.mu.Unlock()
			l.withdraw(ctx, q.k, g.ticket)
			return nil, false, ErrClosed
		}
		if lk := q.tried(g); lk != nil {
			l.mu.Unlock()
			return lk, false, nil
		}
		if err == nil && !wait {
			err = fmt.Errorf("%w: %q is held", ErrNotAcquired, name)
		}
		if err != nil {
			l.tend(q)
			l.mu.Unlock()
			return nil, false, err
		}
		front = true // it came first, so it goes first
	}
	w := &waiter{ch: make(chan *Lock, 1)}
	q.arrive(w, front)
	l.tend(q)
	l.mu.Unlock()

	// The wait's own deadline, set only now: a context with a timeout is a
	// timer, and the uncontended path above should not pay for one.
	if l.opts.WaitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(l.opts.WaitTimeout))
		defer cancel()
	}

	var cause error
	select {
	case lk := <-w.ch:
		return lk, true, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-l.ctx.Done():
		cause = ErrClosed
	}
	l.mu.Lock()
	removed := q.leave(w)
	lastErr := q.lastErr
	l.tend(q)
	l.mu.Unlock()
	if !removed {
		// The lock was handed to us just as the wait ended: pass it on.
		lk := <-w.ch
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = lk.Release(rctx)
		cancel()
	}
	if lastErr != nil && cause != ErrClosed {
		return nil, true, fmt.Errorf("%w (last Redis error: %w)", notAcquired(name, cause), lastErr)
	}
	return nil, true, notAcquired(name, cause)
}

// tryOnce is the uncontended path: one acquire script that takes the lock
// if it is free and nobody is queued for it. It returns the lock won, or
// (nil, nil) when the lock is taken. An attempt that failed without a reply
// and was undone is made again, up to tryAttempts in all, as go-redis
// would have retried the call: a broken pooled connection or a server
// restarting should not fail an Acquire that a moment later would succeed.
func (l *Locker) tryOnce(ctx context.Context, q *queue) (*grant, error) {
	for attempt := 1; ; attempt++ {
		res, err := l.backend.attempt(ctx, q.k)
		if err == nil {
			if res.status != acquired {
				return nil, nil
			}
			return &grant{ticket: res.owner, token: res.token, deadline: res.deadline}, nil
		}
		if ctx.Err() != nil {
			return nil, notAcquired(q.name, ctx.Err())
		}
		var u undone
		if !errors.As(err, &u) || attempt == tryAttempts || !sleepCtx(ctx, l.ctx, l.backoff(attempt)) {
			return nil, notAcquired(q.name, err)
		}
	}
}

// tryAttempts bounds tryOnce's attempts after calls that failed without a
// reply.
const tryAttempts = 3

// sleepCtx waits d, and reports false if ctx or the Locker's context ended
// first.
func sleepCtx(ctx, lctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-lctx.Done():
		return false
	}
}
