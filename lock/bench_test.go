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

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/seedlock"
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
			out = append(out, contention.Seed(&seedlock.Mutex{Client: c, TTL: benchTTL, Wait: benchWait, Retry: 10 * time.Millisecond}, "seed:hot"))
		}
	}
	return out
}

// BenchmarkUncontended: one goroutine acquires and releases one name, with
// the seed lock, this lock, and floorLock (the least any lock with fencing
// tokens from the server's clock costs in Redis).
func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	for _, impl := range []string{"seed", "lock", "floor"} {
		b.Run(impl, func(b *testing.B) {
			var l contention.Lock = floorLock{srv.Client(), "floor:{hot}"}
			if impl != "floor" {
				l = instances(b, srv, impl, 1)[0]
			}
			contention.BenchUncontended(b, l, srv.Client())
		})
	}
}

// BenchmarkUncontendedParallel is BenchmarkUncontended with 8 goroutines
// per core on one client, each on a name of its own: redis-server stays
// busy, as it does when many clients share it, so its time per command
// depends less on waking up for each one.
func BenchmarkUncontendedParallel(b *testing.B) {
	srv := redistest.Start(b)
	for _, impl := range []string{"seed", "lock", "floor"} {
		b.Run(impl, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
			b.Cleanup(func() { _ = c.Close() })
			acquire := acquirer(b, c, impl, lock.Options{TTL: benchTTL, WaitTimeout: benchWait})
			release, err := acquire("warm") // loads the scripts
			if err != nil {
				b.Fatal(err)
			}
			release()
			report := contention.MeasureServer(b, srv.Client())
			var next atomic.Int64
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				name := strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					release, err := acquire(name)
					if err != nil {
						b.Error(err)
						return
					}
					release()
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
			report(b.N)
		})
	}
}

// floorLock is not a usable lock (it never waits, and keeps no queue), but a
// measure: what a lock must spend in Redis, at the least, to give each
// holder a fencing token from the server's clock (lock/internal/core/lua/token.lua) in
// the script that takes the lock. That script runs SET NX PX, TIME and the
// counter's SET … GET; the release is the seed lock's compare-and-delete.
type floorLock struct {
	c   *redis.Client
	key string
}

var (
	floorAcquire = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local t = redis.call('TIME')
local tok = t[1] .. string.sub('00000' .. t[2], -6)
local last = redis.call('SET', KEYS[2], tok, 'PX', ARGV[3], 'GET')
if last and (#last ~= #tok or last >= tok) then return -1 end
return tonumber(tok)`)
	floorRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

func (f floorLock) Acquire(ctx context.Context) (func(), bool, error) {
	owner := uuid.NewString()
	tok, err := floorAcquire.Run(ctx, f.c, []string{f.key, f.key + ":fence"},
		owner, benchTTL.Milliseconds(), lock.DefaultFenceTTL.Milliseconds()).Int64()
	if err != nil || tok <= 0 {
		return nil, false, err
	}
	return func() { _ = floorRelease.Run(ctx, f.c, []string{f.key}, owner).Err() }, true, nil
}

// BenchmarkContended: one hot key, g goroutines spread over p instances
// ("processes", each a Locker with its own client), each acquiring (waiting
// at most 2 s), busy-waiting 200 µs, releasing. See package
// internal/testinfra/contention for what is measured and why. The comparison with
// redsync and bsm/redislock is in the bench module.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []struct{ procs, g int }{{1, 64}, {1, 256}, {2, 8}, {2, 64}, {2, 256}, {4, 64}, {4, 256}} {
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
	acquire := acquirer(b, srv.Client(), impl, opts)
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

// acquirer returns a function that acquires the lock called name with the
// implementation impl ("seed", "lock" or "floor") on c, and its release.
func acquirer(b *testing.B, c *redis.Client, impl string, opts lock.Options) func(name string) (release func(), err error) {
	ctx := context.Background()
	switch impl {
	case "seed":
		m := &seedlock.Mutex{Client: c, TTL: opts.TTL, Wait: opts.WaitTimeout, Retry: 10 * time.Millisecond}
		return func(name string) (func(), error) {
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
		return func(name string) (func(), error) {
			lk, err := l.Acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return func() { _ = lk.Release(ctx) }, nil
		}
	case "floor":
		return func(name string) (func(), error) {
			release, ok, err := floorLock{c, "floor:{" + name + "}"}.Acquire(ctx)
			if err != nil || !ok {
				return nil, fmt.Errorf("floor lock %q: %v %w", name, ok, err)
			}
			return release, nil
		}
	}
	b.Fatalf("no implementation %q", impl)
	return nil
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
