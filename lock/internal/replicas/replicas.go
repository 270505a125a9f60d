// Package replicas confirms each acquisition on the replicas of the master
// that holds it (Redis WAIT): the lock is written on the master and
// replicated asynchronously, so a failover right after the acquisition can
// lose it (post 2 in docs/lock.md's References, the pattern's third
// problem). It is one step, after any acquisition, however it came.
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

// Confirmer confirms acquisitions on n replicas.
type Confirmer struct {
	client  redis.UniversalClient
	n       int
	timeout time.Duration
	ttl     time.Duration
}

// New returns the Confirmer that waits, after an acquisition, until n
// replicas of the master behind client acknowledge it, for at most
// timeout; ttl is the lease.
func New(client redis.UniversalClient, n int, timeout, ttl time.Duration) *Confirmer {
	return &Confirmer{client: client, n: n, timeout: timeout, ttl: ttl}
}

// Confirm extends each owner's lease and then runs one WAIT on the same
// connection, all in one round trip: WAIT returns once n replicas have
// every write up to the last extend, which includes every acquisition,
// however it came (a grant is written by the releaser's connection). So
// the locks one call won wait out one replica timeout together, not one
// each. Too few replicas in time: every lock of the call fails with
// ErrNotReplicated, and the caller releases them.
func (b *Confirmer) Confirm(ctx context.Context, ks []core.Keys, owners []string) ([]time.Time, []error) {
	deadlines, errs := make([]time.Time, len(ks)), make([]error, len(ks))
	if len(ks) == 0 {
		return deadlines, errs
	}
	sent := time.Now()
	exts, acks, err := b.extendAndWait(ctx, ks, owners, false)
	if err != nil && anyNoScript(exts) {
		exts, acks, err = b.extendAndWait(ctx, ks, owners, true)
	}
	n, _ := acks.Int64()
	for i, k := range ks {
		switch v, _ := exts[i].Int64(); {
		case err != nil:
			errs[i] = fmt.Errorf("lock: confirm %q on replicas: %w", k.Name, err)
		case v != 1:
			errs[i] = fmt.Errorf("%w: %q was lost before its replicas confirmed it", core.ErrNotAcquired, k.Name)
		case n < int64(b.n):
			errs[i] = fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v", ErrNotReplicated, k.Name, n, b.n, b.timeout)
		default:
			deadlines[i] = sent.Add(b.ttl)
		}
	}
	return deadlines, errs
}

func anyNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// extendAndWait pipelines the extend script of every lock and one WAIT, so
// that all run on one connection: WAIT counts the replicas that have this
// connection's last write. eval sends the scripts' source (after
// NOSCRIPT).
func (b *Confirmer) extendAndWait(ctx context.Context, ks []core.Keys, owners []string, eval bool) (exts []*redis.Cmd, acks *redis.Cmd, err error) {
	pipe := b.client.Pipeline()
	exts = make([]*redis.Cmd, len(ks))
	for i, k := range ks {
		keys, args := []string{k.Lock}, []any{owners[i], b.ttl.Milliseconds()}
		if eval {
			exts[i] = core.ExtendScript.Eval(ctx, pipe, keys, args...)
		} else {
			exts[i] = core.ExtendScript.EvalSha(ctx, pipe, keys, args...)
		}
	}
	acks = pipe.Do(ctx, "WAIT", b.n, b.timeout.Milliseconds())
	_, err = pipe.Exec(ctx)
	return exts, acks, err
}
