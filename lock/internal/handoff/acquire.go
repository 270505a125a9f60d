package handoff

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
)

// Acquire takes the lock called name for the caller: directly when nobody
// here holds or awaits it, else by waiting in line (unless !wait) until a
// hold is handed to it, ctx ends, or the wait's timeout passes. The hold
// won is confirmed (Backend.Confirm) before it is returned. The Observer's
// wait ends when the hold began (Hold.acquired), which saves a reading of
// the clock.
func (l *Locker) Acquire(ctx context.Context, name string, wait bool) (*Hold, error) {
	start := time.Now()
	h, contended, err := l.acquireOrWait(ctx, name, wait, start)
	if err == nil {
		holds, errs := l.confirm(ctx, []*Hold{h})
		h, err = holds[0], errs[0]
	}
	if err != nil {
		l.shared.cfg.Observer.AcquireFailed(name, time.Since(start), err)
		return nil, err
	}
	l.shared.cfg.Observer.Acquired(name, h.acquired.Sub(start), contended)
	return h, nil
}

// begin is the start of every acquisition: the name's line, and what to
// do (line.begin).
func (l *Locker) begin(name string, wait bool) (ln *line, w *waiter, try bool, err error) {
	if err := core.CheckName(name); err != nil {
		return nil, nil, false, err
	}
	for {
		if ln, err = l.lineFor(name); err != nil {
			return nil, nil, false, err
		}
		w, try, ok, err := ln.begin(wait)
		if ok {
			return ln, w, try, err
		}
		// The line was forgotten after lineFor found it: a new one.
	}
}

func (l *Locker) acquireOrWait(ctx context.Context, name string, wait bool, start time.Time) (h *Hold, contended bool, err error) {
	ln, w, try, err := l.begin(name, wait)
	if err != nil {
		return nil, false, err
	}
	if try {
		// Nobody here holds or awaits the lock: take it from Redis
		// directly. While the attempt is under way, other goroutines wait
		// behind it.
		g, err := l.tryOnce(ctx, ln.k)
		var unwanted string
		h, w, unwanted, err = ln.tried(g, err, wait)
		if unwanted != "" {
			// Close began while we asked: give up what we won.
			l.giveUp(ctx, []queue.Keys{ln.k}, []string{unwanted})
		}
		if h != nil || err != nil {
			return h, false, err
		}
	}

	// The wait's own deadline, set only now: a context with a timeout is a
	// timer, and the uncontended path above should not pay for one.
	if l.shared.cfg.WaitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(l.shared.cfg.WaitTimeout))
		defer cancel()
	}

	var cause error
	select {
	case h := <-w.ch:
		return h, true, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-l.life.Done():
		cause = ErrClosed
	}
	removed, lastErr := ln.leave(w)
	if !removed {
		// The lock was handed to us just as the wait ended: pass it on.
		h := <-w.ch
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.ReleaseTimeout)
		_ = l.Release(rctx, h)
		cancel()
	}
	if lastErr != nil && cause != ErrClosed {
		return nil, true, fmt.Errorf("%w (last Redis error: %w)", notAcquired(name, cause), lastErr)
	}
	return nil, true, notAcquired(name, cause)
}

// tryOnce is the uncontended path: core's acquire, which takes the lock
// if it is free. It returns the lock won, or (nil, nil) when the lock is
// held. An attempt that got no reply, and was abandoned, is made again, up
// to tryAttempts in all, as go-redis would have retried the call: a broken
// pooled connection or a server restarting should not fail an Acquire
// that a moment later would succeed.
func (l *Locker) tryOnce(ctx context.Context, k queue.Keys) (*grant, error) {
	for attempt := 1; ; attempt++ {
		if a, err := l.shared.backend.Try(ctx, k); err == nil {
			if a.Owner == "" {
				return nil, nil
			}
			return &grant{ticket: a.Owner, token: a.Token, deadline: a.Deadline, direct: true}, nil
		} else if ctx.Err() != nil {
			return nil, notAcquired(k.Name, ctx.Err())
		} else if !errors.As(err, new(core.NoReply)) || attempt == tryAttempts || !l.pauseFor(ctx, lease.Backoff(attempt, l.shared.cfg.RecheckInterval)) {
			return nil, notAcquired(k.Name, err)
		}
	}
}

// tryAttempts bounds tryOnce's attempts after calls that got no reply.
const tryAttempts = 3

// pauseFor waits d, and reports false if ctx ended or the Locker closed
// first.
func (l *Locker) pauseFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-l.life.Done():
		return false
	}
}

// TryAcquireAll makes one attempt at each of names, sent together
// (Backend.TryAll), and returns for each its hold or why not. What follows
// the attempts is done once for all the locks too: the withdrawals of
// those won after Close began, and the confirmation of those won (one WAIT
// for a round, where replicas must acknowledge).
func (l *Locker) TryAcquireAll(ctx context.Context, names []string) ([]*Hold, []error) {
	start := time.Now()
	holds, errs := make([]*Hold, len(names)), make([]error, len(names))
	lines := make([]*line, len(names))
	var ks []queue.Keys
	var sentFor []int
	for i, name := range names {
		ln, _, try, err := l.begin(name, false)
		if errs[i] = err; try {
			lines[i] = ln
			ks, sentFor = append(ks, ln.k), append(sentFor, i)
		}
	}
	var as []core.Acquisition
	var aerrs []error
	if len(ks) > 0 {
		as, aerrs = l.shared.backend.TryAll(ctx, ks)
	}
	var wks []queue.Keys
	var unwanted []string
	for j, i := range sentFor {
		var g *grant
		err := aerrs[j]
		if err == nil && as[j].Owner != "" {
			g = &grant{ticket: as[j].Owner, token: as[j].Token, deadline: as[j].Deadline, direct: true}
		} else if err != nil {
			err = notAcquired(names[i], err)
		}
		var u string
		holds[i], _, u, errs[i] = lines[i].tried(g, err, false)
		if u != "" {
			wks, unwanted = append(wks, lines[i].k), append(unwanted, u)
		}
	}
	if len(unwanted) > 0 {
		l.giveUp(ctx, wks, unwanted)
	}
	var won []*Hold
	var wonAt []int
	for i, h := range holds {
		if h != nil {
			won, wonAt = append(won, h), append(wonAt, i)
		}
	}
	if len(won) > 0 {
		confirmed, cerrs := l.confirm(ctx, won)
		for j, i := range wonAt {
			holds[i], errs[i] = confirmed[j], cerrs[j]
		}
	}
	end := time.Now()
	for i := range names {
		if errs[i] != nil {
			l.shared.cfg.Observer.AcquireFailed(names[i], end.Sub(start), errs[i])
		} else {
			l.shared.cfg.Observer.Acquired(names[i], holds[i].acquired.Sub(start), false)
		}
	}
	return holds, errs
}

// confirm is the last step of every acquisition, for all the holds one
// call won: the backend's confirmation, sent once for them all, and the
// Close check. The holds that fail them are released, together, and not
// returned.
func (l *Locker) confirm(ctx context.Context, holds []*Hold) ([]*Hold, []error) {
	ks, owners := make([]queue.Keys, len(holds)), make([]string, len(holds))
	for i, h := range holds {
		ks[i], owners[i] = h.ln.k, h.owner
	}
	deadlines, errs := l.shared.backend.Confirm(ctx, ks, owners)
	// Confirmed in Redis: the holds that pass begin now, for the Observer.
	var now time.Time
	if deadlines != nil || errs != nil {
		now = time.Now()
	}
	closed := l.shared.closed.Load() && !l.shared.cfg.Test.AcquireIgnoresClose
	if deadlines == nil && errs == nil {
		if !closed {
			return holds, make([]error, len(holds)) // nothing to confirm
		}
		deadlines, errs = make([]time.Time, len(holds)), make([]error, len(holds))
	}
	out := make([]*Hold, len(holds))
	var failed []*Hold
	for i, h := range holds {
		err := errs[i]
		if err == nil && !deadlines[i].IsZero() {
			if xerr := h.Extended(deadlines[i]); xerr != nil {
				err = fmt.Errorf("lock: confirm %q on replicas: %w", h.ln.k.Name, xerr)
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
		if !now.IsZero() {
			h.acquired = now
		}
		out[i] = h
	}
	if len(failed) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.ReleaseTimeout)
		_ = l.ReleaseAll(rctx, failed)
		cancel()
	}
	return out, errs
}
