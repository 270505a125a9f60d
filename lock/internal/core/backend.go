// Package core is the lock as the textbook pattern, done right, with no
// goroutine: acquire with SET NX PX under a fresh owner UUID, release with
// compare-and-delete, renew with an owner-checked PEXPIRE, and a fencing
// token from the acquiring script. Single does it over one Redis
// deployment; the Backend interface is what the layers above call, and
// what Redlock (package redlock) implements over several masters.
//
// The scripts in lua/ also carry the Redis side of the fair wait (the
// queue, the grants): a release hands the lock over in the same script.
// The Go here only sends them and reads their replies; package fair is
// where the queue is explained.
package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Backend is where locks live: one Redis deployment (Single), or a quorum
// of independent masters (Redlock). Each call reports in its result what
// happened; none starts a goroutine that outlives it.
type Backend interface {
	// Attempt takes the lock if it is free and nobody is queued for it,
	// under a new ticket (the result's Owner). A failure after which
	// another attempt is safe, because this one can no longer take the
	// lock, is an Undone.
	Attempt(ctx context.Context, k Keys) (AcquireResult, error)
	// AttemptAll is Attempt for several locks, sent together: one round
	// trip where the backend can.
	AttemptAll(ctx context.Context, ks []Keys) ([]AcquireResult, []error)
	// Contend queues the process under ticket, or refreshes its place
	// (refresh), so that a release passes the lock to it; or, where
	// nobody is queued (Redlock), tries to take it.
	Contend(ctx context.Context, k Keys, ticket string, refresh bool) (AcquireResult, error)
	// Release deletes owner's lock; requeue, when not empty, queues the
	// process under that ticket first.
	Release(ctx context.Context, k Keys, owner, requeue string) (ReleaseResult, error)
	// ReleaseAll is Release for several locks, sent together.
	ReleaseAll(ctx context.Context, rs []ReleaseReq) ([]ReleaseResult, []error)
	// Withdraw gives ticket up for good: a lock it holds is passed on, and
	// a late request carrying it will fail.
	Withdraw(ctx context.Context, k Keys, ticket string) error
	// WithdrawAll is Withdraw for several tickets, sent together: one
	// round trip where the backend can, so that giving up the attempts of
	// a failed call costs one timeout, not one per lock.
	WithdrawAll(ctx context.Context, ks []Keys, tickets []string) []error
	// Extend resets owner's lease; ok is false when owner no longer holds
	// the lock, and deadline is the new lease's lower bound.
	Extend(ctx context.Context, k Keys, owner string) (deadline time.Time, ok bool, err error)
	// Confirm runs after every acquisition, before the caller gets the
	// locks, once for all the locks one call won (owners[i] holds ks[i]):
	// replica acknowledgement where configured (package replicas). A
	// non-zero deadline is that lease's new lower bound.
	Confirm(ctx context.Context, ks []Keys, owners []string) (deadlines []time.Time, errs []error)
	// Subscribers are the clients whose Pub/Sub carries the grants or
	// wake-ups: one per Redis deployment.
	Subscribers() []redis.UniversalClient
}

// Undone is the error of an attempt that failed without a reply and was
// undone: it can no longer take the lock, and another attempt under a new
// ticket is safe.
type Undone struct{ Err error }

func (u Undone) Error() string { return u.Err.Error() }
func (u Undone) Unwrap() error { return u.Err }

// Status is the acquire script's verdict.
type Status int

const (
	Waiting   Status = 0
	Acquired  Status = 1
	PlaceLost Status = -1 // a refresh found no place: start over with a new ticket
	Withdrawn Status = -2 // the ticket was withdrawn before this request arrived
)

// AcquireResult is what an acquire script call found.
type AcquireResult struct {
	Status   Status
	Owner    string // Acquired: the ticket that holds the lock
	Token    int64
	Deadline time.Time     // Acquired: the lease lasts at least until then
	RetryIn  time.Duration // Waiting: the holder's remaining lease
	Queued   bool          // Waiting: the process stands in the lock's queue
}

// ReleaseReq is one lock of a ReleaseAll: Release's arguments.
type ReleaseReq struct {
	K              Keys
	Owner, Requeue string
}

// ReleaseResult is what a release found.
type ReleaseResult struct {
	Released bool      // the caller's lock was deleted
	Queued   bool      // the process stands in the queue under the requeue ticket
	Granted  bool      // the lock went to a ticket of this process
	Token    int64     // that grant's fencing token
	Last     int64     // the last token reserved with it
	Deadline time.Time // and its lease's lower bound
	Ticket   string
	// RequeueLost: the call that carried the requeue ticket got no reply,
	// so that ticket may or may not be queued (or even granted).
	RequeueLost bool
}

// ReleaseTimeout bounds the calls that run without a caller's context, or
// after it ended: releases, withdraws, the waiting process's calls. If one
// fails, the lease's TTL frees the lock.
const ReleaseTimeout = 2 * time.Second

// Ms is n milliseconds, as the scripts count.
func Ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
