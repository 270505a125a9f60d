package fair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// Release ends h: the lock goes to the next goroutine here in memory
// (passHeld), or the release script deletes it in Redis and hands it to
// the next in line there. When other goroutines of this process wait, the
// same script queues the process under a new ticket, and if the process
// is first in line the lock comes straight back: the oldest local waiter
// then holds it after one round trip. It returns nil only if a check of
// the key after the hold found it still h's; package lock's Lock.Release
// documents the rest.
func (l *Locker) Release(ctx context.Context, h *Hold) error {
	e, err := h.End()
	if err != nil {
		return err
	}
	st := l.releasing(h, e)
	if st.checked != nil {
		released, err := st.awaitCheck(ctx)
		return l.finish(h, e, released, err)
	}
	sent := time.Now()
	res, err := l.backend.Release(ctx, h.k, h.owner, st.requeue)
	released, err := l.releaseDone(ctx, h, st, sent, res, err)
	return l.finish(h, e, released, err)
}

// ReleaseAll is Release for each of holds, whose calls to Redis go
// together (Backend.ReleaseAll); a hold passed on in memory waits for its
// check instead, after the others' releases.
func (l *Locker) ReleaseAll(ctx context.Context, holds []*Hold) []error {
	errs := make([]error, len(holds))
	endings := make([]lease.Ending, len(holds))
	steps := make([]releaseStep, len(holds))
	begun := make([]bool, len(holds))
	var reqs []core.ReleaseReq
	var sentTo []int
	for i, h := range holds {
		if endings[i], errs[i] = h.End(); errs[i] != nil {
			continue
		}
		begun[i] = true
		steps[i] = l.releasing(h, endings[i])
		if steps[i].checked == nil {
			reqs = append(reqs, core.ReleaseReq{K: h.k, Owner: h.owner, Requeue: steps[i].requeue})
			sentTo = append(sentTo, i)
		}
	}
	released := make([]bool, len(holds))
	rerrs := make([]error, len(holds))
	sent := time.Now()
	res, berrs := l.backend.ReleaseAll(ctx, reqs)
	for j, i := range sentTo {
		released[i], rerrs[i] = l.releaseDone(ctx, holds[i], steps[i], sent, res[j], berrs[j])
	}
	for i, st := range steps {
		if begun[i] && st.checked != nil {
			released[i], rerrs[i] = st.awaitCheck(ctx)
		}
	}
	for i, h := range holds {
		if begun[i] {
			errs[i] = l.finish(h, endings[i], released[i], rerrs[i])
		}
	}
	return errs
}

// releaseStep is a release under way: the queue of its lock in this
// process, and either the ticket its call to Redis queues the process
// under (requeue) or, when the lock was passed on in memory, the check
// that answers it (checked).
type releaseStep struct {
	q       *queue
	requeue string
	checked <-chan error
}

// awaitCheck waits for the check of a lock passed on in memory.
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
// came back with res or err: its verdict on the hold, after the queue and
// the run have heard of it, and a grant nobody here takes was withdrawn.
func (l *Locker) releaseDone(ctx context.Context, h *Hold, st releaseStep, sent time.Time, res core.ReleaseResult, err error) (released bool, _ error) {
	if err == nil && res.RequeueLost && !res.Released && time.Now().Before(h.Deadline()) && !l.cfg.Test.NoReleaseInference {
		// The first call's reply was lost and the second found the lock
		// gone or someone else's. The key lives at least until the hold's
		// deadline, and only its owner can delete it before then: the
		// second call ran before the deadline (its reply came back
		// earlier), so the first call released it. (A Redis that lost the
		// key meanwhile, in a restart or a failover, looks the same: the
		// release cannot tell, and reports it released.)
		res.Released = true
	}
	if unwanted := l.released(h, st, sent, res.Released, res, err); unwanted != "" {
		l.withdraw(ctx, h.k, unwanted)
	}
	return res.Released, err
}

// finish reports what the release found (released, err) to the lease, and
// the release to the observer: after the loss, so that metrics which show
// the hold over show its loss too.
func (l *Locker) finish(h *Hold, e lease.Ending, released bool, err error) error {
	held := time.Since(h.acquired)
	err = h.Finish(e, released, err)
	l.cfg.Observer.Released(h.k.Name, held)
	return err
}

// errUnchecked is why a release that passed the lock on in memory could
// not tell whether its hold was exclusive: no check of the key after the
// hand-off answered (Close, its context, a failed release of the run).
var errUnchecked = errors.New("no check of the key answered after the hand-off")
