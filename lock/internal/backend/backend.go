// Package backend is where a Locker's locks live, behind one interface:
// one Redis deployment, with core's pattern, the queue's line of waiting
// processes and, when asked, the replicas' acknowledgement (Single); or a
// quorum of independent masters (Quorum, package redlock), which keeps no
// line. The hand-off in one process (package handoff) calls it.
package backend

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/queue"
	"github.com/seckill-ref/seckill/lock/internal/redlock"
	"github.com/seckill-ref/seckill/lock/internal/replicas"
)

// Backend is where the locks live, in the words of the hand-off (package
// handoff): one Redis deployment with its line of waiting processes
// (Single), or a quorum of masters, where waiting is trying again
// (Quorum). Each call reports in its result what happened; none starts a
// goroutine that outlives it.
type Backend interface {
	// Try makes one attempt at the lock, under a fresh owner (core's
	// acquire). A failure after which another attempt is safe is a
	// core.NoReply: the attempt was undone, also after ctx ended.
	Try(ctx context.Context, k queue.Keys) (core.Acquisition, error)
	// TryAll is Try for each lock, sent together where the backend can;
	// the attempts that got no reply are undone within ctx's deadline.
	TryAll(ctx context.Context, ks []queue.Keys) ([]core.Acquisition, []error)
	// Wait puts the process in the lock's line under ticket, or refreshes
	// its place there (refresh), and takes the lock if it is the process's
	// turn.
	Wait(ctx context.Context, k queue.Keys, ticket string, refresh bool) (Turn, error)
	// Release releases each lock (queue.Queue.Release says how).
	Release(ctx context.Context, rs []queue.Release) ([]queue.Released, []error)
	// Withdraw gives each tickets[i] of ks[i] up for good: a lock it holds
	// is passed on, and a late request carrying it fails.
	Withdraw(ctx context.Context, ks []queue.Keys, tickets []string) []error
	// Extend resets owner's lease; ok is false when owner no longer holds
	// the lock, and deadline is the new lease's lower bound.
	Extend(ctx context.Context, k queue.Keys, owner string) (deadline time.Time, ok bool, err error)
	// Confirm runs after every acquisition, before the caller gets the
	// locks, once for all the locks one call won (owners[i] holds ks[i]):
	// replica acknowledgement where configured (package replicas). A
	// non-zero deadline is that lease's new lower bound; nil results mean
	// there was nothing to confirm.
	Confirm(ctx context.Context, ks []queue.Keys, owners []string) (deadlines []time.Time, errs []error)
	// Subscribers are the clients whose Pub/Sub carries the grants or
	// wake-ups: one per Redis deployment.
	Subscribers() []redis.UniversalClient
}

// Turn is what a call for the process's turn found.
type Turn struct {
	queue.Turn
	Owner string // Taken: the owner the process holds the lock under
	// NoLine: the lock is held and the backend keeps no line (Redlock):
	// the process tries again after HeldFor, or when a release wakes it.
	NoLine bool
}

func coreKeys(ks []queue.Keys) []core.Keys {
	out := make([]core.Keys, len(ks))
	for i, k := range ks {
		out[i] = k.Keys
	}
	return out
}

// Single is the Backend of one Redis deployment behind client: core's
// acquire and extend, the queue's line, and, when confirm is not nil, the
// replicas' acknowledgement of every acquisition.
func Single(client redis.UniversalClient, c *core.Client, q *queue.Queue, confirm *replicas.Confirmer) Backend {
	return single{client, c, q, confirm}
}

type single struct {
	client  redis.UniversalClient
	core    *core.Client
	line    *queue.Queue
	confirm *replicas.Confirmer
}

func (s single) Try(ctx context.Context, k queue.Keys) (core.Acquisition, error) {
	return s.core.Acquire(ctx, k.Keys)
}

func (s single) TryAll(ctx context.Context, ks []queue.Keys) ([]core.Acquisition, []error) {
	return s.core.AcquireAll(ctx, coreKeys(ks))
}

func (s single) Wait(ctx context.Context, k queue.Keys, ticket string, refresh bool) (Turn, error) {
	var t queue.Turn
	var err error
	if refresh {
		t, err = s.line.Refresh(ctx, k, ticket)
	} else {
		t, err = s.line.Join(ctx, k, ticket)
	}
	return Turn{Turn: t, Owner: ticket}, err
}

func (s single) Release(ctx context.Context, rs []queue.Release) ([]queue.Released, []error) {
	return s.line.Release(ctx, rs)
}

func (s single) Withdraw(ctx context.Context, ks []queue.Keys, tickets []string) []error {
	return s.line.Withdraw(ctx, ks, tickets)
}

func (s single) Extend(ctx context.Context, k queue.Keys, owner string) (time.Time, bool, error) {
	return s.core.Extend(ctx, k.Keys, owner)
}

func (s single) Confirm(ctx context.Context, ks []queue.Keys, owners []string) ([]time.Time, []error) {
	if s.confirm == nil {
		return nil, nil
	}
	return s.confirm.Confirm(ctx, coreKeys(ks), owners)
}

func (s single) Subscribers() []redis.UniversalClient { return []redis.UniversalClient{s.client} }

// Quorum is the Backend of Redlock. It keeps no line: different nodes
// could give the lock to different processes, and none would have a
// quorum. A waiting process tries again, under a fresh owner each time,
// when a release on a node wakes it, or at its re-check; a failed attempt
// is already undone on every node, so a ticket is never used, and there is
// nothing to withdraw but a lock won after Close began.
func Quorum(r *redlock.Redlock) Backend { return quorum{r} }

type quorum struct{ r *redlock.Redlock }

func (q quorum) Try(ctx context.Context, k queue.Keys) (core.Acquisition, error) {
	return q.r.Acquire(ctx, k.Keys, k.Channel)
}

func (q quorum) TryAll(ctx context.Context, ks []queue.Keys) ([]core.Acquisition, []error) {
	channels := make([]string, len(ks))
	for i, k := range ks {
		channels[i] = k.Channel
	}
	return q.r.AcquireAll(ctx, coreKeys(ks), channels)
}

func (q quorum) Wait(ctx context.Context, k queue.Keys, _ string, _ bool) (Turn, error) {
	a, err := q.r.Acquire(ctx, k.Keys, k.Channel)
	if err != nil || a.Owner == "" {
		return Turn{Turn: queue.Turn{Status: queue.Waiting, HeldFor: a.HeldFor}, NoLine: true}, err
	}
	return Turn{Turn: queue.Turn{Status: queue.Taken, Token: a.Token, Deadline: a.Deadline}, Owner: a.Owner}, nil
}

func (q quorum) Release(ctx context.Context, rs []queue.Release) ([]queue.Released, []error) {
	res := make([]queue.Released, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { res[i].Released = q.r.Release(ctx, r.K.Keys, r.K.Channel, r.Owner) })
	}
	wg.Wait()
	return res, make([]error, len(rs))
}

func (q quorum) Withdraw(ctx context.Context, ks []queue.Keys, owners []string) []error {
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() { q.r.Release(ctx, k.Keys, k.Channel, owners[i]) })
	}
	wg.Wait()
	return make([]error, len(ks))
}

func (q quorum) Extend(ctx context.Context, k queue.Keys, owner string) (time.Time, bool, error) {
	return q.r.Extend(ctx, k.Keys, owner)
}

// Confirm has nothing to confirm: the quorum is the confirmation.
func (q quorum) Confirm(context.Context, []queue.Keys, []string) ([]time.Time, []error) {
	return nil, nil
}

func (q quorum) Subscribers() []redis.UniversalClient { return q.r.Clients() }
