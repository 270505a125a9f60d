package fair

import (
	"context"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// Hold is one holding of a named lock by a goroutine of this process: an
// owner ticket and a fencing token, with its lease (Lost, Err, Deadline,
// Context, Extend). Package lock's Lock is a Hold.
type Hold struct {
	lease.Lease
	l        *Locker
	k        core.Keys
	owner    string
	token    int64
	last     int64 // the last token reserved for this run of holds (grant.last)
	run      *run  // the run of holds this one belongs to; nil without reserved tokens
	acquired time.Time
	check    bool // renew at once, to extend a claim or check a run's key
}

// newHold is the hold of a lock just won for g.ticket. Its lease starts
// (start) once the event that made it has released the mutex. Called from
// the queue's events, under Locker.mu.
func (l *Locker) newHold(q *queue, g grant) *Hold {
	h := &Hold{l: l, k: q.k, owner: g.ticket, token: g.token, last: g.last, run: g.run,
		acquired: time.Now(), check: g.claim || g.run != nil}
	if h.run == nil && g.last > g.token {
		h.run = &run{} // it may be passed on
	}
	l.keeper.Init(&h.Lease, h, q.name, g.deadline, g.claim)
	return h
}

// start puts the hold's lease under the watchdog. A claim lease is
// extended at once, and so is the lease of a hold passed on within the
// process, to check that the key is still the run's.
func (h *Hold) start() { h.Lease.Start(h.check) }

// Name is the lock's name.
func (h *Hold) Name() string { return h.k.Name }

// Owner is the ticket stored as the lock's value.
func (h *Hold) Owner() string { return h.owner }

// Token is the hold's fencing token.
func (h *Hold) Token() int64 { return h.token }

// Acquired is when the hold began.
func (h *Hold) Acquired() time.Time { return h.acquired }

// Renew asks the backend to extend the lease (lease.Holder). Its answer
// is also a check of the run: a key still the run's proves exclusive
// every hold of it that ended before the request was sent.
func (h *Hold) Renew(ctx context.Context) (time.Time, bool, error) {
	sent := time.Now()
	deadline, ok, err := h.l.backend.Extend(ctx, h.k, h.owner)
	if err == nil && h.run != nil {
		h.l.checked(h, sent, ok)
	}
	return deadline, ok, err
}

// LeaseLost: the hold lost its lease (lease.Holder); it no longer keeps
// this process's other waiters from contending, and its run is over.
func (h *Hold) LeaseLost(cause error) { h.l.leaseEnded(h, cause) }
