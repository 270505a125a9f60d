package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// benchLock is the little both locks offer the benchmark.
type benchLock interface {
	// acquire waits at most the benchmark's wait; ok is false on timeout.
	acquire(ctx context.Context) (release func(), ok bool, err error)
}

type ourLock struct{ l *lock.Locker }

func (o ourLock) acquire(ctx context.Context) (func(), bool, error) {
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

func (s seedLock) acquire(ctx context.Context) (func(), bool, error) {
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
func instances(b *testing.B, srv *redistest.Server, impl string) []benchLock {
	var out []benchLock
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
				release, ok, err := l.acquire(ctx)
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
// Throughput alone lies (a polling lock re-taken by the goroutine that just
// released looks fast while others starve), so it also reports waits,
// timeouts, how often the lock changed hands and how long a hand-over to
// another goroutine took.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, n := range []int{8, 64, 256} {
		for _, impl := range []string{"seed", "lock"} {
			b.Run(fmt.Sprintf("%s/g=%d", impl, n), func(b *testing.B) {
				contend(b, instances(b, srv, impl), n)
			})
		}
	}
}

type holdRecord struct {
	g            int
	enter, leave time.Time
}

func contend(b *testing.B, locks []benchLock, n int) {
	ctx := context.Background()
	var (
		next     atomic.Int64
		timeouts atomic.Int64
		mu       sync.Mutex
		holds    = make([]holdRecord, 0, b.N)
		waits    = make([][]time.Duration, n)
		wg       sync.WaitGroup
		failed   atomic.Value
	)
	b.ResetTimer()
	start := time.Now()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := locks[g%len(locks)]
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				release, ok, err := l.acquire(ctx)
				if err != nil {
					failed.Store(err)
					return
				}
				if !ok {
					timeouts.Add(1)
					continue
				}
				enter := time.Now()
				waits[g] = append(waits[g], enter.Sub(t0))
				for time.Since(enter) < benchHold {
				}
				leave := time.Now()
				mu.Lock()
				holds = append(holds, holdRecord{g, enter, leave})
				mu.Unlock()
				release()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}

	slices.SortFunc(holds, func(a, b holdRecord) int { return a.enter.Compare(b.enter) })
	var gaps []time.Duration
	switches := 0
	for i := 1; i < len(holds); i++ {
		if holds[i].enter.Before(holds[i-1].leave) {
			b.Fatalf("two holders at once: goroutines %d and %d", holds[i-1].g, holds[i].g)
		}
		if holds[i].g != holds[i-1].g {
			switches++
			gaps = append(gaps, holds[i].enter.Sub(holds[i-1].leave))
		}
	}
	all := slices.Concat(waits...)
	acqPerSec := float64(len(holds)) / elapsed.Seconds()
	b.ReportMetric(acqPerSec, "acq/s")
	b.ReportMetric(100*acqPerSec*benchHold.Seconds(), "eff%")
	b.ReportMetric(ms(pct(all, 50)), "wait-p50-ms")
	b.ReportMetric(ms(pct(all, 99)), "wait-p99-ms")
	b.ReportMetric(ms(pct(all, 100)), "wait-max-ms")
	b.ReportMetric(float64(timeouts.Load()), "timeouts")
	if len(holds) > 1 {
		b.ReportMetric(100*float64(switches)/float64(len(holds)-1), "switch%")
	}
	b.ReportMetric(float64(pct(gaps, 50).Microseconds()), "gap-p50-µs")
}

// pct is the p-th percentile of d (p = 100: the maximum).
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
