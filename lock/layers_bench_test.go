package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/seedlock"
)

// coreLock is lock/internal/core alone, the pattern done right with no
// layer above it: acquire (SET NX PX and the token) and compare-and-delete.
type coreLock struct {
	c *core.Client
	k core.Keys
}

func (l coreLock) Acquire(ctx context.Context) (func(), bool, error) {
	a, err := l.c.Acquire(ctx, l.k)
	if err != nil || a.Owner == "" {
		return nil, false, err
	}
	return func() { _, _ = l.c.Release(ctx, l.k, a.Owner) }, true, nil
}

// BenchmarkLayers: one goroutine acquires and releases one name with the
// seed lock, the floor (floorLock), core alone, and the lock, in turn:
// blocks of 200 pairs, b.N rounds, the order rotating every round. It
// reports each one's rate over the seed lock's in the same round and the
// lock's over core's (medians of the rounds), and the Redis commands each
// runs, and redis-server's CPU, per acquire and release. A lock nobody
// waits for should cost what core costs.
//
//	go test -run '^$' -bench Layers -benchtime 60x ./lock/
func BenchmarkLayers(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	l, err := lock.New(client(), lock.Options{TTL: benchTTL, WaitTimeout: benchWait})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	names := []string{"seed", "floor", "core", "lock"}
	locks := map[string]contention.Lock{
		"seed":  contention.Seed(&seedlock.Mutex{Client: client(), TTL: benchTTL, Wait: benchWait, Retry: 10 * time.Millisecond}, "seed:hot"),
		"floor": floorLock{client(), "floor:{hot}"},
		"core": coreLock{core.New(client(), core.Config{TTL: benchTTL, FenceTTL: lock.DefaultFenceTTL}),
			core.NewKeys(lock.DefaultPrefix, "core")},
		"lock": contention.Ours(l, "hot"),
	}
	once := func(x contention.Lock) {
		release, ok, err := x.Acquire(ctx)
		if err != nil || !ok {
			b.Fatalf("acquire: %v %v", ok, err)
		}
		release()
	}
	cmds := map[string]float64{}
	for _, name := range names {
		for range 100 {
			once(locks[name]) // the scripts load
		}
		before, err := contention.Snapshot(ctx, srv.Client())
		if err != nil {
			b.Fatal(err)
		}
		for range 100 {
			once(locks[name])
		}
		after, err := contention.Snapshot(ctx, srv.Client())
		if err != nil {
			b.Fatal(err)
		}
		cmds[name] = float64(after.Sub(before).Calls) / 100
	}
	const block = 200
	// Each block's rate, and redis-server's process CPU per acquire and
	// release in it (INFO, read outside the timed loop).
	rates, cpu := map[string][]float64{}, map[string][]float64{}
	b.ResetTimer()
	for round := range b.N {
		for i := range names {
			name := names[(i+round)%len(names)]
			before, err := contention.Snapshot(ctx, srv.Client())
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for range block {
				once(locks[name])
			}
			rates[name] = append(rates[name], block/time.Since(start).Seconds())
			after, err := contention.Snapshot(ctx, srv.Client())
			if err != nil {
				b.Fatal(err)
			}
			cpu[name] = append(cpu[name], float64(after.Sub(before).CPU.Nanoseconds())/1e3/block)
		}
	}
	b.StopTimer()
	ratio := func(a, base string) [3]float64 {
		r := make([]float64, b.N)
		for i := range r {
			r[i] = rates[a][i] / rates[base][i]
		}
		sort.Float64s(r)
		return [3]float64{r[b.N/4], r[b.N/2], r[3*b.N/4]}
	}
	var rows []string
	for _, name := range names {
		s, c := ratio(name, "seed"), ratio(name, "core")
		slices.Sort(cpu[name])
		rows = append(rows, fmt.Sprintf("%-5s %3.0f commands  redis %4.1f µs CPU  ×seed %.3f (%.3f–%.3f)  ×core %.3f (%.3f–%.3f)",
			name, cmds[name], cpu[name][b.N/2], s[1], s[0], s[2], c[1], c[0], c[2]))
	}
	b.ReportMetric(ratio("lock", "core")[1], "lock/core")
	b.ReportMetric(ratio("core", "seed")[1], "core/seed")
	b.Logf("%d rounds of %d acquire+release each; commands and redis-server's CPU (median) per acquire+release, and the rate over the seed lock's and core's in the same round, median (quartiles):\n%s",
		b.N, block, strings.Join(slices.Clip(rows), "\n"))
}
