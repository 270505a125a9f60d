package contention

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/seedlock"
)

// Ours adapts package lock: one acquisition of the lock called name, with
// the Locker's own wait.
func Ours(l *lock.Locker, name string) Lock { return ours{l, name} }

type ours struct {
	l    *lock.Locker
	name string
}

func (o ours) Acquire(ctx context.Context) (func(), bool, error) {
	lk, err := o.l.Acquire(ctx, o.name)
	if errors.Is(err, lock.ErrNotAcquired) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func() { _ = lk.Release(ctx) }, true, nil
}

// Seed adapts seedlock.Mutex, the polling lock that is the
// benchmark's baseline, on key.
func Seed(m *seedlock.Mutex, key string) Lock { return seed{m, key} }

type seed struct {
	m   *seedlock.Mutex
	key string
}

func (s seed) Acquire(ctx context.Context) (func(), bool, error) {
	owner, ok, err := s.m.Lock(ctx, s.key)
	if !ok || err != nil {
		return nil, false, err
	}
	return func() { _ = s.m.Unlock(ctx, s.key, owner) }, true, nil
}

// BenchUncontended measures one acquire and release per iteration. With
// admin set (a client of the same redis-server), it also reports what the
// server spent per acquire+release (MeasureServer), after one warm-up
// acquisition that loads the scripts.
func BenchUncontended(b *testing.B, l Lock, admin *redis.Client) {
	ctx := context.Background()
	once := func() {
		release, ok, err := l.Acquire(ctx)
		if err != nil || !ok {
			b.Fatalf("acquire: %v %v", ok, err)
		}
		release()
	}
	var report func(int)
	if admin != nil {
		once()
		report = MeasureServer(b, admin)
	}
	for b.Loop() {
		once()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
	if report != nil {
		report(b.N)
	}
}

// BenchContended runs b.N acquisitions by goroutines goroutines over locks,
// each holding for hold, and reports them. With admin set (a client of the
// same redis-server), it also reports what the server spent per
// acquisition (MeasureServer), hand-offs and waiting included.
func BenchContended(b *testing.B, locks []Lock, goroutines int, hold time.Duration, admin *redis.Client) {
	var report func(int)
	if admin != nil {
		report = MeasureServer(b, admin)
	}
	b.ResetTimer()
	r, err := Run(context.Background(), locks, goroutines, b.N, hold)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	Report(b, r)
	if report != nil {
		report(r.Holds)
	}
}
