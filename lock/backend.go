package lock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend is where locks live: one Redis deployment (single), or a quorum of
// independent masters (Redlock). The Locker's queueing, watchdog and
// passing of the lock are the same over both; each backend answers the
// calls below its own way, and says in its replies what happened.
type backend interface {
	// attempt tries to take the lock while nobody of this process waits
	// for it: if it is free and nobody is queued. It chooses the ticket
	// (the result's owner). A failure after which another attempt is safe,
	// because this one can no longer take the lock, is an undone.
	attempt(ctx context.Context, k keys) (acquireResult, error)
	// attemptAll is attempt for several locks, sent together: one round
	// trip where the backend can.
	attemptAll(ctx context.Context, ks []keys) ([]acquireResult, []error)
	// contend asks for the lock for this process's waiters: it queues the
	// process under ticket, or refreshes its place (refresh), so that a
	// release passes the lock to it; or, where nobody is queued (Redlock),
	// tries to take it. The result says whether the process stands in a
	// queue (queued) and who owns the lock if it was taken (owner).
	contend(ctx context.Context, k keys, ticket string, refresh bool) (acquireResult, error)
	// release deletes owner's lock; requeue, when not empty, queues the
	// process under that ticket first, and the result says whether it did.
	release(ctx context.Context, k keys, owner, requeue string) (releaseResult, error)
	// releaseAll is release for several locks, sent together: one round
	// trip where the backend can.
	releaseAll(ctx context.Context, rs []releaseReq) ([]releaseResult, []error)
	// withdraw gives ticket up for good: a lock it holds is passed on,
	// and a late request carrying it will fail.
	withdraw(ctx context.Context, k keys, ticket string) error
	// extend resets owner's lease; ok is false when owner no longer holds
	// the lock, and deadline is the new lease's lower bound.
	extend(ctx context.Context, k keys, owner string) (deadline time.Time, ok bool, err error)
	// confirm runs after every acquisition, before the caller gets the
	// Lock: replica acknowledgement, when configured.
	confirm(ctx context.Context, lk *Lock) error
	// subscribers are the clients whose Pub/Sub carries the grants or
	// wake-ups: one per Redis deployment.
	subscribers() []redis.UniversalClient
	// close waits for the backend's calls still running in the background.
	close()
}

// undone is the error of an attempt that failed without a reply and was
// undone: it can no longer take the lock, and another attempt under a new
// ticket is safe.
type undone struct{ error }

func (u undone) Unwrap() error { return u.error }

type acquireMode string

const (
	modeNoQueue  acquireMode = "0" // take it if free and nobody is queued
	modeRegister acquireMode = "1" // also queue this process under a new ticket
	modeRefresh  acquireMode = "2" // refresh our place; fail if it is gone
)

type acquireStatus int

const (
	waiting         acquireStatus = 0
	acquired        acquireStatus = 1
	placeLost       acquireStatus = -1 // modeRefresh found no entry: start over with a new ticket
	withdrawnTicket acquireStatus = -2 // the ticket was withdrawn before this request arrived
)

type acquireResult struct {
	status   acquireStatus
	owner    string // acquired: the ticket that holds the lock
	token    int64
	deadline time.Time     // acquired: the lease lasts at least until then
	retryIn  time.Duration // waiting: the holder's remaining lease
	queued   bool          // waiting: the process stands in the lock's queue
}

// releaseReq is one lock of a releaseAll: release's arguments.
type releaseReq struct {
	k              keys
	owner, requeue string
}

type releaseResult struct {
	released bool      // the caller's lock was deleted
	queued   bool      // the process stands in the queue under the requeue ticket
	granted  bool      // the lock went to a ticket of this process
	token    int64     // that grant's fencing token
	last     int64     // the last token reserved with it
	deadline time.Time // and its lease's lower bound
	ticket   string
	// requeueLost: the call that carried the requeue ticket got no reply,
	// so that ticket may or may not be queued (or even granted): withdraw it.
	requeueLost bool
}

// parseGrant splits a grant message: "<process id> <ticket> <token> <last>",
// where last is the last token reserved with it (lua/token.lua, reserve).
// A message of three fields, without last, reserves none.
func parseGrant(payload string) (pid, ticket string, token, last int64, ok bool) {
	f := strings.Fields(payload)
	if len(f) == 3 {
		f = append(f, f[2])
	}
	if len(f) != 4 {
		return "", "", 0, 0, false
	}
	token, err1 := strconv.ParseInt(f[2], 10, 64)
	last, err2 := strconv.ParseInt(f[3], 10, 64)
	return f[0], f[1], token, last, err1 == nil && err2 == nil && last >= token
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
