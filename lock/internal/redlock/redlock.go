// Package redlock is the Redlock backend: a lock held on a quorum of N
// independent Redis masters, so that a minority of them can fail or
// restart empty. It implements core.Backend beside core.Single; package
// lock's NewRedlock documents the algorithm and what it does not
// guarantee.
package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
)

var (
	//go:embed lua/redlock_withdraw.lua
	withdrawLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	withdrawScript   = redis.NewScript(withdrawLua)
	raiseFenceScript = redis.NewScript(raiseFenceLua)
)

// Config is what Redlock needs of the lock's options.
type Config struct {
	TTL         time.Duration // the lease
	EntryLease  time.Duration // passed to the acquire script, which queues nobody here
	FenceTTLms  int64         // the fence counter's lifetime in ms; 0: for ever
	NodeTimeout time.Duration // a node that has not answered by then counts as failed
	Scripts     *core.Scripts // nil: core.SafeScripts
	// Go runs fn in a goroutine its owner waits for before it ends: node
	// calls that outlive the node timeout finish in the background.
	Go func(fn func())
}

// Redlock is the quorum backend.
type Redlock struct {
	nodes  []redis.UniversalClient
	cfg    Config
	quorum int
}

// New returns the backend over the masters behind clients.
func New(clients []redis.UniversalClient, cfg Config) *Redlock {
	if cfg.Scripts == nil {
		cfg.Scripts = core.SafeScripts
	}
	return &Redlock{nodes: clients, cfg: cfg, quorum: len(clients)/2 + 1}
}

func (r *Redlock) Subscribers() []redis.UniversalClient { return r.nodes }

// Confirm has nothing to confirm: the quorum is the confirmation.
func (r *Redlock) Confirm(_ context.Context, ks []core.Keys, _ []string) ([]time.Time, []error) {
	return make([]time.Time, len(ks)), make([]error, len(ks))
}

// drift is the allowance for clock rate differences and processing time
// that the reference implementation subtracts from every lease.
func (r *Redlock) drift() time.Duration { return r.cfg.TTL/100 + 2*time.Millisecond }

type nodeReply[T any] struct {
	v   T
	err error
}

// onEach runs call on every node in parallel and returns what each
// answered within the node timeout; a node that did not answer in time
// has the error context.DeadlineExceeded.
func onEach[T any](ctx context.Context, r *Redlock, call func(ctx context.Context, i int, c redis.UniversalClient) (T, error)) []nodeReply[T] {
	type answer struct {
		i int
		nodeReply[T]
	}
	ch := make(chan answer, len(r.nodes))
	for i, c := range r.nodes {
		r.cfg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.cfg.NodeTimeout)
			defer cancel()
			v, err := call(nctx, i, c)
			ch <- answer{i, nodeReply[T]{v, err}}
		})
	}
	replies := make([]nodeReply[T], len(r.nodes))
	answered := make([]bool, len(r.nodes))
	timer := time.NewTimer(r.cfg.NodeTimeout)
	defer timer.Stop()
collect:
	for range r.nodes {
		select {
		case a := <-ch:
			replies[a.i], answered[a.i] = a.nodeReply, true
		case <-timer.C:
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	for i := range replies {
		if !answered[i] {
			replies[i].err = context.DeadlineExceeded
		}
	}
	return replies
}

// Contend tries again: no queue spans the nodes (different nodes could
// grant to different processes, and none would have a quorum), so waiting
// processes try again when a release wakes them, or at the re-check. The
// process's ticket is not used: a failed try is withdrawn on every node,
// so each has a ticket of its own.
func (r *Redlock) Contend(ctx context.Context, k core.Keys, _ string, _ bool) (core.AcquireResult, error) {
	return r.Attempt(ctx, k)
}

// Attempt takes the lock on a quorum of nodes under a new ticket, or
// undoes the attempt everywhere. Each node's client retries its own call,
// so a failed attempt is not tried again at once.
func (r *Redlock) Attempt(ctx context.Context, k core.Keys) (core.AcquireResult, error) {
	ticket := uuid.NewString()
	start := time.Now()
	replies := onEach(ctx, r, func(ctx context.Context, _ int, c redis.UniversalClient) ([]int64, error) {
		return r.cfg.Scripts.Acquire.Run(ctx, c, k.ForTicket(ticket),
			ticket, r.cfg.TTL.Milliseconds(), "redlock", "0", r.cfg.EntryLease.Milliseconds(), k.Channel,
			r.cfg.FenceTTLms,
		).Int64Slice()
	})
	var held []int
	var token int64
	var retryIn time.Duration
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case len(rep.v) == 3 && rep.v[0] == int64(core.Acquired):
			held = append(held, i)
			token = max(token, rep.v[1])
		case len(rep.v) == 3 && rep.v[2] > 0:
			if d := core.Ms(rep.v[2]); retryIn == 0 || d < retryIn {
				retryIn = d
			}
		}
	}
	deadline := start.Add(r.cfg.TTL - r.drift())
	if len(held) >= r.quorum && time.Now().Before(deadline) && r.raiseFences(ctx, k, held, token) {
		return core.AcquireResult{Status: core.Acquired, Owner: ticket, Token: token, Deadline: deadline}, nil
	}
	// Not a quorum, or too late to be worth anything: undo everywhere.
	r.withdrawEverywhere(ctx, k, ticket)
	if answered := len(r.nodes) - len(errs); answered < r.quorum {
		return core.AcquireResult{}, fmt.Errorf("lock: only %d of %d Redis nodes answered: %w", answered, len(r.nodes), errors.Join(errs...))
	}
	return core.AcquireResult{Status: core.Waiting, RetryIn: retryIn}, nil
}

// AttemptAll is Attempt for each lock of ks, all at once: each is a quorum
// of its own, decided on its own clock reading, so they cannot share one
// call per node as a single server's scripts share one pipeline.
func (r *Redlock) AttemptAll(ctx context.Context, ks []core.Keys) ([]core.AcquireResult, []error) {
	res, errs := make([]core.AcquireResult, len(ks)), make([]error, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() { res[i], errs[i] = r.Attempt(ctx, k) })
	}
	wg.Wait()
	return res, errs
}

// raiseFences sets the fence counter of the nodes in held to at least
// token, and reports whether a quorum of them did.
func (r *Redlock) raiseFences(ctx context.Context, k core.Keys, held []int, token int64) bool {
	want := make(map[int]bool, len(held))
	for _, i := range held {
		want[i] = true
	}
	tok := strconv.FormatInt(token, 10)
	replies := onEach(ctx, r, func(ctx context.Context, i int, c redis.UniversalClient) (bool, error) {
		if !want[i] {
			return false, nil
		}
		return true, raiseFenceScript.Run(ctx, c, []string{k.Fence}, tok, r.cfg.FenceTTLms).Err()
	})
	raised := 0
	for _, rep := range replies {
		if rep.err == nil && rep.v {
			raised++
		}
	}
	return raised >= r.quorum
}

// withdrawEverywhere withdraws ticket on every node (redlock_withdraw.lua),
// without the caller's cancellation: it runs when an attempt failed or was
// cancelled, and to release. It returns how many nodes the ticket held.
func (r *Redlock) withdrawEverywhere(ctx context.Context, k core.Keys, ticket string) int {
	ctx = context.WithoutCancel(ctx)
	deleted := 0
	for _, rep := range onEach(ctx, r, func(ctx context.Context, _ int, c redis.UniversalClient) (int64, error) {
		return withdrawScript.Run(ctx, c, []string{k.Lock, k.Tombstone(ticket)}, ticket, k.Channel, r.cfg.TTL.Milliseconds()).Int64()
	}) {
		if rep.err == nil && rep.v == 1 {
			deleted++
		}
	}
	return deleted
}

// Release deletes the lock on every node; it was held if a quorum had it.
func (r *Redlock) Release(ctx context.Context, k core.Keys, owner, _ string) (core.ReleaseResult, error) {
	deleted := r.withdrawEverywhere(ctx, k, owner)
	return core.ReleaseResult{Released: deleted >= r.quorum}, nil
}

// ReleaseAll is Release for each lock of rs, all at once.
func (r *Redlock) ReleaseAll(ctx context.Context, rs []core.ReleaseReq) ([]core.ReleaseResult, []error) {
	res, errs := make([]core.ReleaseResult, len(rs)), make([]error, len(rs))
	var wg sync.WaitGroup
	for i, q := range rs {
		wg.Go(func() { res[i], errs[i] = r.Release(ctx, q.K, q.Owner, q.Requeue) })
	}
	wg.Wait()
	return res, errs
}

func (r *Redlock) Withdraw(ctx context.Context, k core.Keys, ticket string) error {
	r.withdrawEverywhere(ctx, k, ticket)
	return nil
}

// WithdrawAll withdraws every ticket at once, each on every node.
func (r *Redlock) WithdrawAll(ctx context.Context, ks []core.Keys, tickets []string) []error {
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() { r.withdrawEverywhere(ctx, k, tickets[i]) })
	}
	wg.Wait()
	return make([]error, len(ks))
}

// Extend needs a quorum, within the lease it extends.
func (r *Redlock) Extend(ctx context.Context, k core.Keys, owner string) (time.Time, bool, error) {
	start := time.Now()
	replies := onEach(ctx, r, func(ctx context.Context, _ int, c redis.UniversalClient) (int64, error) {
		return core.ExtendScript.Run(ctx, c, []string{k.Lock}, owner, r.cfg.TTL.Milliseconds()).Int64()
	})
	extended, refused := 0, 0
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.v == 1:
			extended++
		default:
			refused++
		}
	}
	deadline := start.Add(r.cfg.TTL - r.drift())
	switch {
	case extended >= r.quorum && time.Now().Before(deadline):
		return deadline, true, nil
	case len(r.nodes)-refused < r.quorum:
		return deadline, false, nil // a quorum says we are not the owner
	}
	return deadline, false, fmt.Errorf("lock: extended on %d of %d nodes: %w", extended, len(r.nodes), errors.Join(errs...))
}
