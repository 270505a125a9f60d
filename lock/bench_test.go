package lock_test

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/antipattern"
)

// Run with:
//
//	go test -run '^$' -bench . -benchtime 5s ./lock/
//
// The polling lock of antipattern (SET NX PX, retry every 10 ms) runs
// beside this package's lock in the same process against the same
// redis-server, as the baseline.
// BenchmarkUncontended also reports what redis-server spent per
// acquire+release (commands, µs inside commands, process CPU: see
// contention.ServerCost), and BenchmarkManyNames what stays in Redis.

const (
	benchWait = 2 * time.Second
	benchHold = 200 * time.Microsecond
	benchTTL  = 10 * time.Second
)

// instances returns procs "processes" of the named implementation, each on
// its own client.
func instances(b *testing.B, srv *redistest.Server, impl string, procs int) []contention.Lock {
	var out []contention.Lock
	for range procs {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		switch impl {
		case "lock":
			l, err := lock.New(c, lock.Options{TTL: benchTTL, WaitTimeout: benchWait})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			out = append(out, contention.Ours(l, "hot"))
		case "seed":
			out = append(out, contention.Seed(&antipattern.SeedLock{Client: c, TTL: benchTTL, Wait: benchWait, Retry: 10 * time.Millisecond}, "seed:hot"))
		}
	}
	return out
}

func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	for _, impl := range []string{"seed", "lock"} {
		b.Run(impl, func(b *testing.B) {
			contention.BenchUncontended(b, instances(b, srv, impl, 1)[0], srv.Client())
		})
	}
}

// BenchmarkContended: one hot key, g goroutines spread over p instances
// ("processes", each a Locker with its own client), each acquiring (waiting
// at most 2 s), busy-waiting 200 µs, releasing. See package
// internal/testinfra/contention for what is measured and why. The comparison with
// redsync and bsm/redislock is in the bench module.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []struct{ procs, g int }{{2, 8}, {2, 64}, {2, 256}, {4, 64}, {4, 256}} {
		for _, impl := range []string{"seed", "lock"} {
			b.Run(fmt.Sprintf("%s/p=%d/g=%d", impl, c.procs, c.g), func(b *testing.B) {
				contention.BenchContended(b, instances(b, srv, impl, c.procs), c.g, benchHold, srv.Client())
			})
		}
	}
}

// BenchmarkManyNames acquires and releases locks over -names distinct
// names (b.N acquisitions, 8 goroutines, name i for the i-th), each
// implementation on its own redis-server, and reports what is left in Redis
// at the end, per name: keys (DBSIZE) and bytes of used_memory. The
// lock/fence-ttl=1s case also waits until its keys have expired (FenceTTL
// 1 s, TTL 1 s) and reports the keys left after that idle second.
func BenchmarkManyNames(b *testing.B) {
	for _, impl := range []string{"seed", "lock"} {
		b.Run(impl, func(b *testing.B) {
			manyNames(b, impl, lock.Options{TTL: benchTTL, WaitTimeout: benchWait})
		})
	}
	b.Run("lock/fence-ttl=1s", func(b *testing.B) {
		admin := manyNames(b, "lock", lock.Options{TTL: time.Second, FenceTTL: time.Second, WaitTimeout: benchWait})
		ctx := context.Background()
		deadline := time.Now().Add(30 * time.Second)
		for admin.DBSize(ctx).Val() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // Redis drops expired keys in the background
		}
		b.ReportMetric(float64(admin.DBSize(ctx).Val()), "keys-after-idle")
	})
}

// benchNames is BenchmarkManyNames's number of distinct names: with
// -test.benchtime 1000000x -names 100000, a million acquisitions over
// 100,000 names.
var benchNames = flag.Int("names", 10_000, "BenchmarkManyNames: how many distinct lock names")

func manyNames(b *testing.B, impl string, opts lock.Options) (admin *redis.Client) {
	srv := redistest.Start(b)
	admin = srv.Client()
	ctx := context.Background()
	c := srv.Client()
	var acquire func(name string) (release func(), err error)
	switch impl {
	case "seed":
		m := &antipattern.SeedLock{Client: c, TTL: opts.TTL, Wait: opts.WaitTimeout, Retry: 10 * time.Millisecond}
		acquire = func(name string) (func(), error) {
			owner, ok, err := m.Lock(ctx, "seed:"+name)
			if err != nil || !ok {
				return nil, fmt.Errorf("seed lock %q: %v %w", name, ok, err)
			}
			return func() { _ = m.Unlock(ctx, "seed:"+name, owner) }, nil
		}
	case "lock":
		l, err := lock.New(c, opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		acquire = func(name string) (func(), error) {
			lk, err := l.Acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return func() { _ = lk.Release(ctx) }, nil
		}
	}
	release, err := acquire("warm")
	if err != nil {
		b.Fatal(err)
	}
	release()
	if err := admin.FlushAll(ctx).Err(); err != nil { // the scripts stay cached
		b.Fatal(err)
	}
	before := usedMemory(b, admin)
	var next atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			release, err := acquire(strconv.FormatInt(i%int64(*benchNames), 10))
			if err != nil {
				b.Error(err)
				return
			}
			release()
		}
	})
	b.StopTimer()
	names := min(b.N, *benchNames)
	keys := admin.DBSize(ctx).Val()
	b.ReportMetric(float64(keys)/float64(names), "keys/name")
	b.ReportMetric(float64(usedMemory(b, admin)-before)/float64(names), "bytes/name")
	b.Logf("%d acquisitions over %d names: %d keys left", b.N, names, keys)
	return admin
}

// usedMemory is the server's used_memory (INFO memory).
func usedMemory(b *testing.B, c *redis.Client) int64 {
	info := c.Info(context.Background(), "memory").Val()
	_, rest, ok := strings.Cut(info, "used_memory:")
	if !ok {
		b.Fatalf("no used_memory in INFO memory")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(rest[:strings.IndexByte(rest, '\n')]), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
