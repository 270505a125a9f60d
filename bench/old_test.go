//go:build oldlock

package bench_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	oldlock "github.com/seckill-ref/seckill/bench/testdata/old/lock"
	"github.com/seckill-ref/seckill/internal/testinfra/contention"
)

// The old lock (old-lock.sh), beside today's, in the interleaved
// benchmarks.
func init() {
	oldLock = func(b *testing.B, c *redis.Client) contention.Lock {
		l, err := oldlock.New(c, oldlock.Options{TTL: ttl, WaitTimeout: wait})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return old{l}
	}
}

type old struct{ l *oldlock.Locker }

func (o old) Acquire(ctx context.Context) (func(), bool, error) {
	lk, err := o.l.Acquire(ctx, "old:hot")
	if errors.Is(err, oldlock.ErrNotAcquired) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func() { _ = lk.Release(ctx) }, true, nil
}
