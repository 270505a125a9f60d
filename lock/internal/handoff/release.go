package handoff

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
)

// Release ends h: the lock goes to the next goroutine here in memory
// (passHeld), or the release script deletes it in Redis and gives it
// to the next in line there. When other goroutines of this process wait,
// the same script puts the process back in line under a new ticket, and if
// nobody else waits the lock comes straight back: the oldest local waiter
// then holds it after one round trip. It returns nil only if a check of the
// key after the hold found it still h's; package lock's Lock.Release
// documents the rest.
//
// It reads the clock once, at its start, which ends the lease and the hold
// the Observer is told of, and stands for the call's send time: a check's
// send time may be earlier than the real one, never later.
func (l *Locker) Release(ctx context.Context, h *Hold) error {
	now := time.Now()
	e, err := h.End(now)
	if err != nil {
		return err
	}
	st := h.ln.releaseBegins(h, e)
	var released bool
	if st.checked != nil {
		released, err = st.awaitCheck(ctx)
	} else {
		res, errs := l.shared.backend.Release(ctx, []queue.Release{{K: h.ln.k, Owner: h.owner, Requeue: st.requeue, Direct: h.direct}})
		released, err = l.releaseDone(ctx, h, now, res[0], errs[0])
	}
	return l.finish(h, e, now, released, err)
}

// ReleaseAll is Release for each of holds, whose calls to Redis go
// together (Backend.Release); a hold handed on in memory waits for its
// check instead, after the others' releases.
func (l *Locker) ReleaseAll(ctx context.Context, holds []*Hold) []error {
	now := time.Now()
	errs := make([]error, len(holds))
	endings := make([]lease.Ending, len(holds))
	steps := make([]releaseStep, len(holds))
	begun := make([]bool, len(holds))
	var rs []queue.Release
	var sentFor []int
	for i, h := range holds {
		if endings[i], errs[i] = h.End(now); errs[i] != nil {
			continue
		}
		begun[i] = true
		steps[i] = h.ln.releaseBegins(h, endings[i])
		if steps[i].checked == nil {
			rs = append(rs, queue.Release{K: h.ln.k, Owner: h.owner, Requeue: steps[i].requeue, Direct: h.direct})
			sentFor = append(sentFor, i)
		}
	}
	released := make([]bool, len(holds))
	rerrs := make([]error, len(holds))
	if len(rs) > 0 {
		res, berrs := l.shared.backend.Release(ctx, rs)
		for j, i := range sentFor {
			released[i], rerrs[i] = l.releaseDone(ctx, holds[i], now, res[j], berrs[j])
		}
	}
	for i, st := range steps {
		if begun[i] && st.checked != nil {
			released[i], rerrs[i] = st.awaitCheck(ctx)
		}
	}
	for i, h := range holds {
		if begun[i] {
			errs[i] = l.finish(h, endings[i], now, released[i], rerrs[i])
		}
	}
	return errs
}

// awaitCheck waits for the check of a lock handed on in memory.
func (st releaseStep) awaitCheck(ctx context.Context) (released bool, err error) {
	select {
	case err := <-st.checked:
		switch err {
		case nil: // the key was still the run's after the hand-off
			return true, nil
		case lease.ErrLeaseLost: // it was not: the hold may not have been exclusive
			return false, nil
		}
		return false, fmt.Errorf("%w: %w", errUnchecked, err)
	case <-ctx.Done():
		return false, fmt.Errorf("%w: %w", errUnchecked, ctx.Err())
	}
}

// releaseDone is what follows the release's call, sent at sent, which
// came back with res or err: its verdict on the hold, after the line and
// the run have heard of it, and a grant nobody here takes was withdrawn.
func (l *Locker) releaseDone(ctx context.Context, h *Hold, sent time.Time, res queue.Released, err error) (released bool, _ error) {
	if err == nil && res.RequeueLost && !res.Released && time.Now().Before(h.Deadline()) && !l.shared.cfg.Test.NoReleaseInference {
		// The first call's reply was lost and the second found the lock
		// gone or someone else's. The key lives at least until the hold's
		// deadline, and only its owner can delete it before then: the
		// second call ran before the deadline (its reply came back
		// earlier), so the first call released it. (A Redis that lost the
		// key meanwhile, in a restart or a failover, looks the same: the
		// release cannot tell, and reports it released.)
		res.Released = true
	}
	if unwanted := h.ln.releaseEnded(h, sent, res.Released, res, err); unwanted != "" {
		l.giveUp(ctx, []queue.Keys{h.ln.k}, []string{unwanted})
	}
	return res.Released, err
}

// finish reports what the release that began at end found (released,
// err) to the lease, and the release to the observer: after the loss, so
// that metrics which show the hold over show its loss too.
func (l *Locker) finish(h *Hold, e lease.Ending, end time.Time, released bool, err error) error {
	err = h.Finish(e, released, err)
	l.shared.cfg.Observer.Released(h.ln.k.Name, end.Sub(h.acquired))
	return err
}

// errUnchecked is why a release that handed the lock on in memory could
// not tell whether its hold was exclusive: no check of the key after the
// hand-off answered (Close, its context, a failed release of the run).
var errUnchecked = errors.New("no check of the key answered after the hand-off")
