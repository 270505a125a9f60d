// Package replicas confirms each acquisition on the replicas of the master
// that holds it (Redis WAIT), as Redisson does for a master with replicas:
// the lock is written on the master and replicated asynchronously, so a
// failover right after the acquisition can lose it. It is a core.Backend
// that adds that one step to another.
package replicas

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
)

// ErrNotReplicated means the lock was taken on the master but too few
// replicas acknowledged it in time, so it was released again. It matches
// core.ErrNotAcquired.
var ErrNotReplicated = fmt.Errorf("%w: too few replicas acknowledged", core.ErrNotAcquired)

// Backend is b, whose every acquisition is confirmed by n replicas.
type Backend struct {
	core.Backend
	client  redis.UniversalClient
	n       int
	timeout time.Duration
	ttl     time.Duration
}

// New makes b wait, after every acquisition, until n replicas of the
// master behind client acknowledge it, for at most timeout; ttl is the
// lease.
func New(b core.Backend, client redis.UniversalClient, n int, timeout, ttl time.Duration) *Backend {
	return &Backend{Backend: b, client: client, n: n, timeout: timeout, ttl: ttl}
}

// Confirm extends owner's lease and runs WAIT on the same connection, in
// one round trip: WAIT returns once n replicas have every write up to the
// extend, which includes the acquisition, however it came (a grant is
// written by the releaser's connection). Too few in time: the caller
// releases the lock and the acquisition fails with ErrNotReplicated.
func (b *Backend) Confirm(ctx context.Context, k core.Keys, owner string) (time.Time, error) {
	sent := time.Now()
	ext, acks, err := b.extendAndWait(ctx, k, owner, false)
	if err != nil && redis.HasErrorPrefix(ext.Err(), "NOSCRIPT") {
		ext, acks, err = b.extendAndWait(ctx, k, owner, true)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("lock: confirm %q on replicas: %w", k.Name, err)
	}
	if n, _ := ext.Int64(); n != 1 {
		return time.Time{}, fmt.Errorf("%w: %q was lost before its replicas confirmed it", core.ErrNotAcquired, k.Name)
	}
	if n, _ := acks.Int64(); n < int64(b.n) {
		return time.Time{}, fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v",
			ErrNotReplicated, k.Name, n, b.n, b.timeout)
	}
	return sent.Add(b.ttl), nil
}

// extendAndWait pipelines the extend script and WAIT, so that both run on
// one connection: WAIT counts the replicas that have this connection's
// last write. eval sends the script's source (after NOSCRIPT).
func (b *Backend) extendAndWait(ctx context.Context, k core.Keys, owner string, eval bool) (ext, acks *redis.Cmd, err error) {
	pipe := b.client.Pipeline()
	keys, args := []string{k.Lock}, []any{owner, b.ttl.Milliseconds()}
	if eval {
		ext = core.ExtendScript.Eval(ctx, pipe, keys, args...)
	} else {
		ext = core.ExtendScript.EvalSha(ctx, pipe, keys, args...)
	}
	acks = pipe.Do(ctx, "WAIT", b.n, b.timeout.Milliseconds())
	_, err = pipe.Exec(ctx)
	return ext, acks, err
}
