package fair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
)

// Acquire takes the lock called name for the caller: directly when nobody
// here holds or awaits it, else by waiting in line (unless !wait) until a
// hold is passed to it, ctx ends, or the wait's timeout passes. The hold
// won is confirmed (Backend.Confirm) before it is returned.
func (l *Locker) Acquire(ctx context.Context, name string, wait bool) (*Hold, error) {
	start := time.Now()
	h, contended, err := l.acquireOrWait(ctx, name, wait, start)
	if err == nil {
		holds, errs := l.acquired(ctx, []*Hold{h})
		h, err = holds[0], errs[0]
	}
	if err != nil {
		l.cfg.Observer.AcquireFailed(name, time.Since(start), err)
		return nil, err
	}
	l.cfg.Observer.Acquired(name, time.Since(start), contended)
	return h, nil
}

// TryAcquireAll makes one attempt at each of names, sent together
// (Backend.AttemptAll), and returns for each its hold or why not. What
// follows the attempt is done once for all the locks too: the
// withdrawals of those won after Close began, and the confirmation of
// those won (one WAIT for a round, where replicas must acknowledge).
func (l *Locker) TryAcquireAll(ctx context.Context, names []string) ([]*Hold, []error) {
	start := time.Now()
	qs, errs := l.beginAll(names)
	var ks []core.Keys
	var sentFor []int
	for i, q := range qs {
		if q != nil {
			ks = append(ks, q.k)
			sentFor = append(sentFor, i)
		}
	}
	res, rerrs := l.backend.AttemptAll(ctx, ks)
	holds, unwanted := l.triedAll(qs, sentFor, res, rerrs, errs)
	if len(unwanted) > 0 {
		wks, wts := make([]core.Keys, len(unwanted)), make([]string, len(unwanted))
		for j, u := range unwanted {
			wks[j], wts[j] = ks[u], res[u].Owner
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.ReleaseTimeout)
		_ = l.backend.WithdrawAll(wctx, wks, wts)
		cancel()
	}
	var won []*Hold
	var wonAt []int
	for i, h := range holds {
		if h != nil {
			won = append(won, h)
			wonAt = append(wonAt, i)
		}
	}
	if len(won) > 0 {
		confirmed, cerrs := l.acquired(ctx, won)
		for j, i := range wonAt {
			holds[i], errs[i] = confirmed[j], cerrs[j]
		}
	}
	for i := range names {
		if errs[i] != nil {
			l.cfg.Observer.AcquireFailed(names[i], time.Since(start), errs[i])
		} else {
			l.cfg.Observer.Acquired(names[i], time.Since(start), false)
		}
	}
	return holds, errs
}

// acquired is the last step of every acquisition, for all the holds one
// call won: the backend's confirmation, sent once for them all, and the
// Close check. The holds that fail them are released, together, and
// not returned.
func (l *Locker) acquired(ctx context.Context, holds []*Hold) ([]*Hold, []error) {
	ks, owners := make([]core.Keys, len(holds)), make([]string, len(holds))
	for i, h := range holds {
		ks[i], owners[i] = h.k, h.owner
	}
	deadlines, errs := l.backend.Confirm(ctx, ks, owners)
	closed := l.isClosed() && !l.cfg.Test.AcquireIgnoresClose
	out := make([]*Hold, len(holds))
	var failed []*Hold
	for i, h := range holds {
		err := errs[i]
		if err == nil && !deadlines[i].IsZero() {
			if xerr := h.Extended(deadlines[i]); xerr != nil {
				err = fmt.Errorf("lock: confirm %q on replicas: %w", h.k.Name, xerr)
			}
		}
		if err == nil && closed {
			// Close began while we acquired. It may have told this hold
			// ErrClosed, or may have run before the hold existed and then
			// nothing watches its lease: either way the caller must not hold
			// it. (Once Acquire has returned, Close reports through Lost.)
			err = ErrClosed
		}
		if err != nil {
			errs[i] = err
			failed = append(failed, h)
			continue
		}
		out[i] = h
	}
	if len(failed) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = l.ReleaseAll(rctx, failed)
		cancel()
	}
	return out, errs
}

func (l *Locker) acquireOrWait(ctx context.Context, name string, wait bool, start time.Time) (h *Hold, contended bool, err error) {
	q, w, err := l.begin(name, wait)
	if err != nil {
		return nil, false, err
	}
	if w == nil {
		// Nobody here holds or awaits the lock: try Redis directly. While
		// the attempt is in flight, other goroutines queue behind it.
		g, err := l.tryOnce(ctx, q)
		var unwanted string
		h, w, unwanted, err = l.tried(q, g, err, wait)
		if unwanted != "" {
			// Close began while we asked: withdraw what we won.
			l.withdraw(ctx, q.k, unwanted)
		}
		if h != nil || err != nil {
			return h, false, err
		}
	}

	// The wait's own deadline, set only now: a context with a timeout is a
	// timer, and the uncontended path above should not pay for one.
	if l.cfg.WaitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(l.cfg.WaitTimeout))
		defer cancel()
	}

	var cause error
	select {
	case h := <-w.ch:
		return h, true, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-l.ctx.Done():
		cause = ErrClosed
	}
	removed, lastErr := l.leave(q, w)
	if !removed {
		// The lock was handed to us just as the wait ended: pass it on.
		h := <-w.ch
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = l.Release(rctx, h)
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
		res, err := l.backend.Attempt(ctx, q.k)
		if err == nil {
			if res.Status != core.Acquired {
				return nil, nil
			}
			return &grant{ticket: res.Owner, token: res.Token, deadline: res.Deadline}, nil
		}
		if ctx.Err() != nil {
			return nil, notAcquired(q.name, ctx.Err())
		}
		var u core.Undone
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

// notAcquired wraps the reason a wait ended so that the error matches both
// ErrNotAcquired and cause (redsync #164 and bsm/redislock #79 ask for this).
func notAcquired(name string, cause error) error {
	return fmt.Errorf("%w: %q: %w", core.ErrNotAcquired, name, cause)
}
