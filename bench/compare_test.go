package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/seedlock"
)

// Run with (from this directory):
//
//	go test -run '^$' -bench . -benchtime 5s
//
// Every lock uses its library's usual waiting, with the same limits: a 10 s
// lease and at most 2 s of waiting per acquisition.
const (
	wait = 2 * time.Second
	hold = 200 * time.Microsecond
	ttl  = 10 * time.Second
)

// redsyncLock is go-redsync/redsync with its defaults: retries every 50 to
// 250 ms (random), here until the 2 s wait ends.
type redsyncLock struct{ rs *redsync.Redsync }

func (r redsyncLock) Acquire(ctx context.Context) (func(), bool, error) {
	m := r.rs.NewMutex("redsync:hot", redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32))
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := m.LockContext(wctx); err != nil {
		if errors.Is(err, redsync.ErrFailed) || wctx.Err() != nil {
			return nil, false, nil
		}
		return nil, false, err
	}
	return func() { _, _ = m.UnlockContext(ctx) }, true, nil
}

// redislockLock is bsm/redislock with exponential backoff (16 ms to 512 ms;
// its default is not to retry at all).
type redislockLock struct{ c *redislock.Client }

func (r redislockLock) Acquire(ctx context.Context) (func(), bool, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	lk, err := r.c.Obtain(wctx, "redislock:hot", ttl, &redislock.Options{
		RetryStrategy: redislock.ExponentialBackoff(16*time.Millisecond, 512*time.Millisecond),
	})
	if errors.Is(err, redislock.ErrNotObtained) || wctx.Err() != nil {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func() { _ = lk.Release(ctx) }, true, nil
}

var impls = []string{"seed", "redsync", "redislock", "lock"}

// instances returns two "processes" of impl, each with its own client.
func instances(b *testing.B, srv *redistest.Server, impl string) []contention.Lock {
	var out []contention.Lock
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		switch impl {
		case "seed":
			out = append(out, contention.Seed(&seedlock.Mutex{Client: c, TTL: ttl, Wait: wait, Retry: 10 * time.Millisecond}, "seed:hot"))
		case "redsync":
			out = append(out, redsyncLock{redsync.New(goredis.NewPool(c))})
		case "redislock":
			out = append(out, redislockLock{redislock.New(c)})
		case "lock":
			l, err := lock.New(c, lock.Options{TTL: ttl, WaitTimeout: wait})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			out = append(out, contention.Ours(l, "hot"))
		}
	}
	return out
}

func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	for _, impl := range impls {
		b.Run(impl, func(b *testing.B) {
			contention.BenchUncontended(b, instances(b, srv, impl)[0], srv.Client())
		})
	}
}

func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, n := range []int{8, 64, 256} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%s/g=%d", impl, n), func(b *testing.B) {
				contention.BenchContended(b, instances(b, srv, impl), n, hold, srv.Client())
			})
		}
	}
}
