package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/contention"
	"github.com/seckill-ref/seckill/internal/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/antipattern"
)

// Run with:
//
//	go test -run '^$' -bench . -benchtime 5s ./lock/
//
// The seed lock (SET NX PX, retry every 10 ms) runs beside this package's
// lock in the same process against the same redis-server, as the baseline.

type ourLock struct{ l *lock.Locker }

func (o ourLock) Acquire(ctx context.Context) (func(), bool, error) {
	lk, err := o.l.Acquire(ctx, "hot")
	if errors.Is(err, lock.ErrNotAcquired) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func() { _ = lk.Release(ctx) }, true, nil
}

type seedLock struct{ m *antipattern.SeedLock }

func (s seedLock) Acquire(ctx context.Context) (func(), bool, error) {
	owner, ok, err := s.m.Lock(ctx, "seed:hot")
	if !ok || err != nil {
		return nil, false, err
	}
	return func() { _ = s.m.Unlock(ctx, "seed:hot", owner) }, true, nil
}

const (
	benchWait = 2 * time.Second
	benchHold = 200 * time.Microsecond
	benchTTL  = 10 * time.Second
)

// instances returns two "processes" of the named implementation, each on
// its own client.
func instances(b *testing.B, srv *redistest.Server, impl string) []contention.Lock {
	var out []contention.Lock
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		switch impl {
		case "lock":
			l, err := lock.New(c, lock.Options{TTL: benchTTL, WaitTimeout: benchWait})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			out = append(out, ourLock{l})
		case "seed":
			out = append(out, seedLock{&antipattern.SeedLock{Client: c, TTL: benchTTL, Wait: benchWait, Retry: 10 * time.Millisecond}})
		}
	}
	return out
}

func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	for _, impl := range []string{"seed", "lock"} {
		b.Run(impl, func(b *testing.B) {
			l := instances(b, srv, impl)[0]
			ctx := context.Background()
			for b.Loop() {
				release, ok, err := l.Acquire(ctx)
				if err != nil || !ok {
					b.Fatalf("acquire: %v %v", ok, err)
				}
				release()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
		})
	}
}

// BenchmarkContended: one hot key, n goroutines spread over two instances,
// each acquiring (waiting at most 2 s), busy-waiting 200 µs, releasing.
// See package internal/contention for what is measured and why. The
// comparison with redsync and bsm/redislock is in the bench module.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, n := range []int{8, 64, 256} {
		for _, impl := range []string{"seed", "lock"} {
			b.Run(fmt.Sprintf("%s/g=%d", impl, n), func(b *testing.B) {
				locks := instances(b, srv, impl)
				b.ResetTimer()
				r, err := contention.Run(context.Background(), locks, n, b.N, benchHold)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				contention.Report(b, r)
			})
		}
	}
}
