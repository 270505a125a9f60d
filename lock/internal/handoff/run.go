package handoff

import "time"

// run is one acquisition from Redis and the holds a process hands it on
// to among its own goroutines without asking Redis (passHeld, in turn.go):
// one owner in Redis, several holds in a row. A hold that ends with a
// hand-off in memory has not been checked against Redis at its end, and
// Redis may have lost the key meanwhile (a restart, a failover, an
// eviction) and let another process take the lock. So its release waits
// for a check sent after the hand-off: the next hold renews its lease at
// once, and whichever check of the run comes back first (that renewal, a
// later one, or the release of the run's last hold) answers it. The key
// cannot become the run's again once lost (the owner is a fresh UUID), so
// a check that finds it the run's at time s proves it was the run's
// throughout every hold that ended before s.
//
// A run is guarded by its line's mutex.
type run struct {
	// lost is set once the key was found not to be the run's, or a hold of
	// the run lost its lease otherwise (its deadline passed, Close): no
	// hold of the run may start after that, and every unanswered release
	// reports it.
	lost error
	// pending are the releases that handed the lock on and wait for a
	// check sent after they did.
	pending []pendingCheck
	// ended: the run's last hold is being released in Redis; a check that
	// finds the key gone from now on may have been overtaken by that
	// release, and proves nothing.
	ended bool
}

type pendingCheck struct {
	after time.Time  // the hand-off: a check must have been sent no earlier
	ch    chan error // capacity 1: nil once a check found the key the run's
}

// await registers a release that hands the lock on now.
func (r *run) await() <-chan error {
	ch := make(chan error, 1)
	r.pending = append(r.pending, pendingCheck{after: time.Now(), ch: ch})
	return ch
}

// confirmed: a check sent at sent found the key still the run's: every
// hold that ended before then was exclusive.
func (r *run) confirmed(sent time.Time) {
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

// runLost marks r lost with cause, and answers every waiting release with
// it.
func (r *run) runLost(cause error) {
	if r.lost == nil {
		r.lost = cause
	}
	for _, p := range r.pending {
		p.ch <- r.lost
	}
	r.pending = nil
}

// foundLost: a check found the key not the run's. Unless the run's own
// release may have deleted it (ended), the run is lost from now on, and
// foundLost reports true: no hold of it starts, and its current holder is
// to be told at once, then every release waiting for a check.
func (r *run) foundLost(cause error) bool {
	if r.ended || r.lost != nil {
		return false
	}
	r.lost = cause
	return true
}
