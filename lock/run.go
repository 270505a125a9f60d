package lock

import "time"

// run is one acquisition from Redis and the Locks a process passes it on
// to among its own goroutines without asking Redis (queue.passHeld): one
// owner ticket in Redis, several holds in a row. A hold that ends with a
// hand-off in memory has not been checked against Redis at its end, and
// Redis may have lost the key meanwhile (a restart, a failover, an
// eviction) and let another process take the lock. So its Release waits
// for a check sent after the hand-off: the next Lock renews its lease at
// once, and whichever ownership check of the run comes back first (that
// renewal, a later one, or the release script of the run's last Lock)
// answers it. The key cannot become the run's again once lost (the owner
// is a fresh UUID), so a check that finds it the run's at time s proves it
// was the run's throughout every hold that ended before s.
//
// Every field is guarded by Locker.mu.
type run struct {
	// lost is set once the key was found not to be the run's, or a Lock of
	// the run lost its lease otherwise (its deadline passed, Close): no
	// hold of the run may start after that, and every unanswered Release
	// reports it.
	lost error
	// pending are the Releases that handed the lock on and wait for a
	// check sent after they did.
	pending []pendingCheck
	// ended: the run's last Lock is being released in Redis; a check that
	// finds the key gone from now on may have been overtaken by that
	// release, and proves nothing.
	ended bool
}

type pendingCheck struct {
	after time.Time  // the hand-off: a check must have been sent no earlier
	ch    chan error // capacity 1: nil once a check found the key the run's
}

// await registers a Release that hands the lock on now. Caller holds
// Locker.mu.
func (r *run) await() <-chan error {
	ch := make(chan error, 1)
	r.pending = append(r.pending, pendingCheck{after: time.Now(), ch: ch})
	return ch
}

// confirmed is told that a check sent at sent found the key still the
// run's: every hold that ended before then was exclusive.
func (l *Locker) confirmed(r *run, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := r.pending[:0]
	for _, p := range r.pending {
		if p.after.After(sent) {
			keep = append(keep, p)
			continue
		}
		p.ch <- nil
	}
	clear(r.pending[len(keep):])
	r.pending = keep
}

// runLost marks r lost with cause, and answers every waiting Release with
// it. Caller holds Locker.mu.
func (r *run) runLost(cause error) {
	if r.lost == nil {
		r.lost = cause
	}
	for _, p := range r.pending {
		p.ch <- r.lost
	}
	r.pending = nil
}

// foundLost is told that a check of r by a Lock already passed on (whose
// own lose does nothing) found the key not the run's. Unless the run's own
// release may have deleted it (ended), the run is lost: no hold of it
// starts from now on, its current holder is told at once, and then every
// Release waiting for a check.
func (l *Locker) foundLost(r *run, name string) {
	l.mu.Lock()
	if r.ended || r.lost != nil {
		l.mu.Unlock()
		return
	}
	r.lost = ErrLeaseLost
	var h *Lock
	if q := l.queues[name]; q != nil && q.holder != nil && q.holder.run == r {
		h = q.holder
	}
	l.mu.Unlock()
	if h != nil {
		h.lose(ErrLeaseLost)
	}
	l.mu.Lock()
	r.runLost(ErrLeaseLost)
	l.mu.Unlock()
}
