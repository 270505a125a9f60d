package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// release runs the release script for lk. When other goroutines of this
// process wait for the lock, the same script queues the process under a new
// ticket, and if the process is first in line the lock comes straight back:
// the oldest local waiter then holds it after one round trip. Before that,
// while lk has reserved tokens left, the next local waiter takes the lock
// at once (passHeld), and release returns when a check of the key sent
// after that answers.
func (l *Locker) release(ctx context.Context, lk *Lock) (released bool, err error) {
	st := l.releaseStart(lk)
	if st.checked != nil {
		return st.awaitCheck(ctx)
	}
	sent := time.Now()
	res, err := l.backend.release(ctx, lk.k, lk.owner, st.requeue)
	return l.releaseDone(ctx, lk, st, sent, res, err)
}

// releaseAll is release for several Locks whose releases go to Redis
// together (backend.releaseAll); a Lock passed on in memory waits for its
// check instead, after the others' releases.
func (l *Locker) releaseAll(ctx context.Context, locks []*Lock) (released []bool, errs []error) {
	released, errs = make([]bool, len(locks)), make([]error, len(locks))
	steps := make([]releaseStep, len(locks))
	var reqs []releaseReq
	var sentTo []int
	for i, lk := range locks {
		steps[i] = l.releaseStart(lk)
		if steps[i].checked == nil {
			reqs = append(reqs, releaseReq{k: lk.k, owner: lk.owner, requeue: steps[i].requeue})
			sentTo = append(sentTo, i)
		}
	}
	sent := time.Now()
	res, rerrs := l.backend.releaseAll(ctx, reqs)
	for j, i := range sentTo {
		released[i], errs[i] = l.releaseDone(ctx, locks[i], steps[i], sent, res[j], rerrs[j])
	}
	for i, st := range steps {
		if st.checked != nil {
			released[i], errs[i] = st.awaitCheck(ctx)
		}
	}
	return released, errs
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

// releaseStart is what a release decides in this process before its call:
// pass the lock on in memory (passHeld), or go to Redis.
func (l *Locker) releaseStart(lk *Lock) releaseStep {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := releaseStep{q: l.queues[lk.name]}
	if st.q != nil {
		if st.checked = st.q.passHeld(lk); st.checked != nil {
			l.tend(st.q)
			return st
		}
		st.requeue = st.q.release(lk)
	} else if lk.run != nil {
		lk.run.ended = true
	}
	return st
}

// awaitCheck waits for the check of a lock passed on in memory.
func (st releaseStep) awaitCheck(ctx context.Context) (released bool, err error) {
	select {
	case err := <-st.checked:
		switch err {
		case nil: // the key was still the run's after the hand-off
			return true, nil
		case ErrLeaseLost: // it was not: the hold may not have been exclusive
			return false, nil
		}
		return false, fmt.Errorf("%w: %w", errUnchecked, err)
	case <-ctx.Done():
		return false, fmt.Errorf("%w: %w", errUnchecked, ctx.Err())
	}
}

// releaseDone is what follows the release's call, sent at sent, which
// came back with res or err.
func (l *Locker) releaseDone(ctx context.Context, lk *Lock, st releaseStep, sent time.Time, res releaseResult, err error) (released bool, _ error) {
	if err == nil && res.requeueLost && !res.released && time.Now().Before(lk.Deadline()) && !hooks.noReleaseInference {
		// The first call's reply was lost and the second found the lock gone
		// or someone else's. The key lives at least until the Lock's
		// deadline, and only this Lock's owner can delete it before then:
		// the second call ran before the deadline (its reply came back
		// earlier), so the first call released it. (A Redis that lost the
		// key meanwhile, in a restart or a failover, looks the same: the
		// release cannot tell, and reports it released.)
		res.released = true
	}

	if lk.run != nil {
		// The release is the last check of lk's run: it answers Releases
		// that handed the lock on before it, if no renewal did; with its
		// error if it failed, as nothing of the run will check again.
		if err == nil && res.released {
			l.confirmed(lk.run, sent)
		} else {
			l.mu.Lock()
			lk.run.runLost(cmp.Or(err, ErrLeaseLost))
			l.mu.Unlock()
		}
	}

	l.mu.Lock()
	unwanted := ""
	if q := st.q; q != nil && l.queues[lk.name] == q {
		unwanted = q.released(lk, st.requeue, sent, res, err)
		l.tend(q)
	} else if err == nil && res.granted {
		unwanted = res.ticket
	}
	l.mu.Unlock()
	if unwanted != "" {
		l.withdraw(ctx, lk.k, unwanted)
	}
	return res.released, err
}

// errUnchecked is why a Release that passed the lock on in memory could
// not tell whether its hold was exclusive: no check of the key after the
// hand-off answered (Close, its context, a failed release of the run).
var errUnchecked = errors.New("no check of the key answered after the hand-off")
