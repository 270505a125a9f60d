// Package core is the Redis lock as the textbook pattern, done right, and
// nothing else: acquire with SET NX PX under a fresh owner UUID, with a
// fencing token; release with compare and delete; extend with an
// owner-checked PEXPIRE. No goroutine, and nothing of the waiting that the
// layers above add: a reader can stop here and know the pattern. Each operation is one script in lua/, which names
// its keys and arguments at its top.
//
// What it adds to package seedlock (the pattern as the usual posts teach
// it, see docs/lock.md) is what the pattern leaves open: the fencing token
// (lua/token.lua), the lease extension, and the acquire whose reply never
// came, which is abandoned so that it cannot take the lock late
// (lua/abandon.lua).
package core

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core/once"
)

// The errors of the pattern; package lock documents them.
var (
	ErrNotAcquired = errors.New("lock: not acquired")
	ErrNotHeld     = errors.New("lock: not held")
)

// Config is what a Client needs of the lock's options.
type Config struct {
	TTL      time.Duration // the lease of every acquisition, in whole ms
	FenceTTL time.Duration // how long the fence counter outlives the last acquisition; 0: for ever
	Scripts  *Scripts      // nil: DefaultScripts
	// RetryScriptCalls (a test's control) lets go-redis send an acquire
	// again when its reply is lost.
	RetryScriptCalls bool
}

// Client takes and gives back locks in the Redis deployment behind a
// UniversalClient: one server, Sentinel, or Cluster.
type Client struct {
	rdb     redis.UniversalClient
	ttl     time.Duration
	scripts *Scripts
	retry   bool
	// The scripts' constant arguments, as interfaces once: go-redis would
	// otherwise allocate for each, on every call.
	ttlArg, fenceTTLArg any
}

// New returns the Client of the deployment behind rdb.
func New(rdb redis.UniversalClient, cfg Config) *Client {
	if cfg.Scripts == nil {
		cfg.Scripts = DefaultScripts
	}
	return &Client{rdb: rdb, ttl: cfg.TTL, scripts: cfg.Scripts, retry: cfg.RetryScriptCalls,
		ttlArg: cfg.TTL.Milliseconds(), fenceTTLArg: cfg.FenceTTL.Milliseconds()}
}

// Acquisition is what an acquire found.
type Acquisition struct {
	Owner    string        // the new owner, who holds the lock; "" if someone else does
	Token    int64         // its fencing token
	Deadline time.Time     // its lease lasts at least until then, on this process's clock
	HeldFor  time.Duration // Owner "": how long the other holder's lease still runs
}

// NoReply is the error of an acquire that got no reply, and was abandoned
// since: it can no longer take the lock, and another attempt is safe.
type NoReply struct{ Err error }

func (e NoReply) Error() string { return e.Err.Error() }
func (e NoReply) Unwrap() error { return e.Err }

// Acquire takes the lock of k if it is free, under a fresh owner UUID:
//
//	SET lock owner NX PX ttl, and the fencing token   (lua/acquire.lua)
//
// A fresh owner per acquisition is what lets only this acquisition release
// or extend the lock. An acquire is never sent twice (package once): run
// again after its lock was released, it would take the lock for nobody.
// One that gets no reply may have run, or may still run, so its owner is
// abandoned before Acquire returns its NoReply, also after ctx ended (for
// at most ReleaseTimeout: a Redis that stalled runs the abandon once it
// answers again).
func (c *Client) Acquire(ctx context.Context, k Keys) (Acquisition, error) {
	owner := uuid.NewString()
	a, err := c.AcquireAs(ctx, k, owner)
	if err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		defer cancel()
		c.abandonAll(actx, []Keys{k}, []string{owner})
		return Acquisition{}, NoReply{err}
	}
	return a, nil
}

// AcquireAs runs the acquire script once for owner, which its caller made
// and gives up itself if the call fails (package redlock, which gives an
// attempt up on every node at once).
func (c *Client) AcquireAs(ctx context.Context, k Keys, owner string) (Acquisition, error) {
	sent := time.Now()
	return c.acquisition(once.Run(ctx, c.rdb, c.scripts.acquire, c.retry, c.acquireKeys(k, owner), c.acquireArgs(owner)...), owner, sent)
}

// AcquireAll is Acquire for each lock of ks, sent in one pipeline: one
// round trip (a ClusterClient sends one pipeline to each master the keys
// are on). The acquires that got no reply are abandoned together, within
// what is left of ctx's time: when Redis stops answering, a call for many
// locks waits out one timeout, not one per lock.
func (c *Client) AcquireAll(ctx context.Context, ks []Keys) ([]Acquisition, []error) {
	res, errs := make([]Acquisition, len(ks)), make([]error, len(ks))
	owners, cmds := make([]string, len(ks)), make([]*redis.Cmd, len(ks))
	for i := range ks {
		owners[i] = uuid.NewString()
	}
	sent := time.Now()
	once.RunAll(ctx, c.rdb, c.scripts.acquire, cmds,
		func(i int) []string { return c.acquireKeys(ks[i], owners[i]) },
		func(i int) []any { return c.acquireArgs(owners[i]) })
	var lostKs []Keys
	var lost []string
	for i, cmd := range cmds {
		var err error
		if res[i], err = c.acquisition(cmd, owners[i], sent); err == nil {
			continue
		}
		errs[i] = NoReply{err}
		lostKs, lost = append(lostKs, ks[i]), append(lost, owners[i])
	}
	if len(lost) > 0 {
		actx, cancel := abandonContext(ctx)
		defer cancel()
		c.abandonAll(actx, lostKs, lost)
	}
	return res, errs
}

func (c *Client) acquireKeys(k Keys, owner string) []string {
	return []string{k.Lock, k.Fence, k.Tombstone(owner)}
}

func (c *Client) acquireArgs(owner string) []any { return []any{owner, c.ttlArg, c.fenceTTLArg} }

// acquisition reads the acquire script's reply to a request for owner
// sent at sent: the token, -1 - pttl, or nil.
func (c *Client) acquisition(cmd *redis.Cmd, owner string, sent time.Time) (Acquisition, error) {
	n, err := cmd.Int64()
	switch {
	case err == redis.Nil:
		return Acquisition{}, nil // abandoned: this owner will never hold the lock
	case err != nil:
		return Acquisition{}, err
	case n > 0:
		// The lease began after the request was sent: on this process's
		// clock it lasts at least until sent + ttl.
		return Acquisition{Owner: owner, Token: n, Deadline: sent.Add(c.ttl)}, nil
	}
	return Acquisition{HeldFor: Ms(-1 - n)}, nil
}

// Release deletes the lock of k if owner still holds it, compare and
// delete in one script (lua/release.lua), and reports whether it did.
func (c *Client) Release(ctx context.Context, k Keys, owner string) (bool, error) {
	n, err := c.scripts.release.Run(ctx, c.rdb, []string{k.Lock}, owner).Int64()
	return n == 1, err
}

// Extend resets owner's lease to the full TTL, on the existing key only
// (lua/extend.lua); ok is false when owner no longer holds the lock.
// deadline is the new lease's lower bound: the request's send time plus
// the TTL.
func (c *Client) Extend(ctx context.Context, k Keys, owner string) (deadline time.Time, ok bool, err error) {
	sent := time.Now()
	n, err := ExtendScript.Run(ctx, c.rdb, []string{k.Lock}, owner, c.ttlArg).Int64()
	return sent.Add(c.ttl), n == 1, err
}

// abandonAll abandons each owners[i] of ks[i], in one pipeline
// (lua/abandon.lua).
func (c *Client) abandonAll(ctx context.Context, ks []Keys, owners []string) {
	once.RunAll(ctx, c.rdb, c.scripts.abandon, make([]*redis.Cmd, len(ks)),
		func(i int) []string { return []string{ks[i].Lock, ks[i].Tombstone(owners[i])} },
		func(i int) []any { return []any{owners[i], c.ttlArg} })
}

// abandonContext is the context of the abandons after a call under ctx
// failed: it outlives ctx's cancellation but not its deadline, so that a
// call that failed ends on time, and lasts at most ReleaseTimeout. It
// allows at least abandonFloor, enough to send the abandons when the
// deadline has just passed (a Redis that stopped answering runs them, after
// the acquires, once it answers again); an abandon not made in time leaves
// its lock, if the acquire took it, to its lease's TTL.
func abandonContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(ReleaseTimeout)
	if d, ok := ctx.Deadline(); ok {
		if floor := time.Now().Add(abandonFloor); d.Before(floor) {
			d = floor
		}
		if d.Before(end) {
			end = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

const abandonFloor = 100 * time.Millisecond

// ReleaseTimeout bounds the calls that run without a caller's context, or
// after it ended: releases, abandons, a waiting process's calls. If one
// fails, the lease's TTL frees the lock.
const ReleaseTimeout = 2 * time.Second

// Ms is n milliseconds, as the scripts count.
func Ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
