// Package redlock is the lock on a quorum of N independent Redis masters,
// so that a minority of them can fail or restart empty: core's pattern on
// every node at once, held only where a quorum holds it. Package lock's
// NewRedlock documents the algorithm and what it does not guarantee.
//
// There is no line of waiting processes: different nodes could give the
// lock to different processes, and none would have a quorum. A release
// publishes a wake-up on each node instead, and the waiting processes try
// again (package handoff).
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
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	releaseScript    = redis.NewScript(releaseLua)
	raiseFenceScript = redis.NewScript(raiseFenceLua)
)

// Config is what Redlock needs of the lock's options.
type Config struct {
	TTL         time.Duration // the lease
	FenceTTL    time.Duration // the fence counter's lifetime; 0: for ever
	NodeTimeout time.Duration // a node that has not answered by then counts as failed
	Scripts     *core.Scripts // nil: core.DefaultScripts
	// Go runs fn in a goroutine its owner waits for before it ends: node
	// calls that outlive the node timeout finish in the background.
	Go func(fn func())
}

// Redlock is the lock over the nodes.
type Redlock struct {
	clients []redis.UniversalClient
	nodes   []*core.Client
	cfg     Config
	quorum  int
}

// New returns the lock over the masters behind clients.
func New(clients []redis.UniversalClient, cfg Config) *Redlock {
	r := &Redlock{clients: clients, cfg: cfg, quorum: len(clients)/2 + 1}
	for _, c := range clients {
		r.nodes = append(r.nodes, core.New(c, core.Config{TTL: cfg.TTL, FenceTTL: cfg.FenceTTL, Scripts: cfg.Scripts}))
	}
	return r
}

// Clients are the nodes' clients, whose Pub/Sub carries the wake-ups.
func (r *Redlock) Clients() []redis.UniversalClient { return r.clients }

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
func onEach[T any](ctx context.Context, r *Redlock, call func(ctx context.Context, i int) (T, error)) []nodeReply[T] {
	type answer struct {
		i int
		nodeReply[T]
	}
	ch := make(chan answer, len(r.nodes))
	for i := range r.nodes {
		r.cfg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.cfg.NodeTimeout)
			defer cancel()
			v, err := call(nctx, i)
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

// Acquire takes the lock on a quorum of nodes under a fresh owner, or
// undoes the attempt everywhere (channel is where the release wakes the
// waiting processes). It holds the lock only with a quorum and while the
// lease it can vouch for lasts: TTL less the attempt's time and the drift,
// from before the first request. Its token is the largest its quorum
// issued, after it raised every node of the quorum to it (raiseFences).
func (r *Redlock) Acquire(ctx context.Context, k core.Keys, channel string) (core.Acquisition, error) {
	owner := uuid.NewString()
	start := time.Now()
	replies := onEach(ctx, r, func(ctx context.Context, i int) (core.Acquisition, error) {
		return r.nodes[i].AcquireAs(ctx, k, owner)
	})
	var held []int
	var token int64
	var heldFor time.Duration
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.v.Owner != "":
			held = append(held, i)
			token = max(token, rep.v.Token)
		case rep.v.HeldFor > 0 && (heldFor == 0 || rep.v.HeldFor < heldFor):
			heldFor = rep.v.HeldFor
		}
	}
	deadline := start.Add(r.cfg.TTL - r.drift())
	if len(held) >= r.quorum && time.Now().Before(deadline) && r.raiseFences(ctx, k, held, token) {
		return core.Acquisition{Owner: owner, Token: token, Deadline: deadline}, nil
	}
	// Not a quorum, or too late to be worth anything: undo everywhere.
	r.Release(ctx, k, channel, owner)
	if answered := len(r.nodes) - len(errs); answered < r.quorum {
		return core.Acquisition{}, fmt.Errorf("lock: only %d of %d Redis nodes answered: %w", answered, len(r.nodes), errors.Join(errs...))
	}
	return core.Acquisition{HeldFor: heldFor}, nil
}

// AcquireAll is Acquire for each lock of ks, all at once: each is a quorum
// of its own, decided on its own clock reading, so they cannot share one
// call per node as a single server's scripts share one pipeline.
func (r *Redlock) AcquireAll(ctx context.Context, ks []core.Keys, channels []string) ([]core.Acquisition, []error) {
	res, errs := make([]core.Acquisition, len(ks)), make([]error, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() { res[i], errs[i] = r.Acquire(ctx, k, channels[i]) })
	}
	wg.Wait()
	return res, errs
}

// raiseFences sets the fence counter of the nodes in held to at least
// token, and reports whether a quorum of them did. Any later quorum
// shares a node with this one, so the next holder's token is larger, also
// where a node's clock is behind the others'.
func (r *Redlock) raiseFences(ctx context.Context, k core.Keys, held []int, token int64) bool {
	want := make(map[int]bool, len(held))
	for _, i := range held {
		want[i] = true
	}
	tok := strconv.FormatInt(token, 10)
	replies := onEach(ctx, r, func(ctx context.Context, i int) (bool, error) {
		if !want[i] {
			return false, nil
		}
		return true, raiseFenceScript.Run(ctx, r.clients[i], []string{k.Fence}, tok, r.cfg.FenceTTL.Milliseconds()).Err()
	})
	raised := 0
	for _, rep := range replies {
		if rep.err == nil && rep.v {
			raised++
		}
	}
	return raised >= r.quorum
}

// Release gives owner up on every node (lua/release.lua), without the
// caller's cancellation: it runs to release, and when an attempt failed or
// was cancelled. It reports whether a quorum had the lock.
func (r *Redlock) Release(ctx context.Context, k core.Keys, channel, owner string) bool {
	ctx = context.WithoutCancel(ctx)
	deleted := 0
	for _, rep := range onEach(ctx, r, func(ctx context.Context, i int) (int64, error) {
		return releaseScript.Run(ctx, r.clients[i], []string{k.Lock, k.Tombstone(owner)}, owner, channel, r.cfg.TTL.Milliseconds()).Int64()
	}) {
		if rep.err == nil && rep.v == 1 {
			deleted++
		}
	}
	return deleted >= r.quorum
}

// Extend needs a quorum, within the lease it extends.
func (r *Redlock) Extend(ctx context.Context, k core.Keys, owner string) (time.Time, bool, error) {
	start := time.Now()
	type extended struct{ ok bool }
	replies := onEach(ctx, r, func(ctx context.Context, i int) (extended, error) {
		_, ok, err := r.nodes[i].Extend(ctx, k, owner)
		return extended{ok}, err
	})
	ok, refused := 0, 0
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.v.ok:
			ok++
		default:
			refused++
		}
	}
	deadline := start.Add(r.cfg.TTL - r.drift())
	switch {
	case ok >= r.quorum && time.Now().Before(deadline):
		return deadline, true, nil
	case len(r.nodes)-refused < r.quorum:
		return deadline, false, nil // a quorum says this owner no longer holds the lock
	}
	return deadline, false, fmt.Errorf("lock: extended on %d of %d nodes: %w", ok, len(r.nodes), errors.Join(errs...))
}
