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
	l.mu.Lock()
	q := l.queues[lk.name]
	if q != nil {
		if checked := q.passHeld(lk); checked != nil {
			l.tend(q)
			l.mu.Unlock()
			select {
			case err := <-checked:
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
	}
	requeue := ""
	if q != nil {
		requeue = q.release(lk)
	} else if lk.run != nil {
		lk.run.ended = true
	}
	l.mu.Unlock()

	sent := time.Now()
	res, err := l.backend.release(ctx, lk.k, lk.owner, requeue)
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
	if q != nil && l.queues[lk.name] == q {
		unwanted = q.released(lk, requeue, sent, res, err)
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
