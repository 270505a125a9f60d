package bench_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/seedlock"
)

// Run with (from this directory; the old lock is optional, see old-lock.sh):
//
//	./old-lock.sh a95df49
//	go test -tags oldlock -run '^$' -bench Interleaved -benchtime 20x
//
// On a shared machine a rate moves with everything else that runs, by
// more than the differences between locks. These benchmarks therefore run
// the locks in one process, against one redis-server, in short blocks
// that take turns (the order rotates every round), and report for each
// lock the median over the rounds of its ratio to a baseline measured in
// the same round: -benchtime Nx is the number of rounds.

// oldLock, when the oldlock build tag is set (old_test.go), makes a
// Locker of the old lock for one "process".
var oldLock func(b *testing.B, c *redis.Client) contention.Lock

// uncontendedImpls are the locks of BenchmarkInterleavedUncontended, each
// one "process" with its own client.
func uncontendedImpls(b *testing.B, srv *redistest.Server) (names []string, locks map[string]contention.Lock) {
	locks = map[string]contention.Lock{}
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	names = []string{"seed", "redislock", "floor", "lock"}
	locks["seed"] = contention.Seed(&seedlock.Mutex{Client: client(), TTL: ttl, Wait: wait, Retry: 10 * time.Millisecond}, "seed:hot")
	locks["redislock"] = redislockLock{redislock.New(client())}
	locks["floor"] = floorLock{client(), "floor:{hot}"}
	l, err := lock.New(client(), lock.Options{TTL: ttl, WaitTimeout: wait})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	locks["lock"] = contention.Ours(l, "hot")
	if oldLock != nil {
		names = append(names, "old")
		locks["old"] = oldLock(b, client())
	}
	return names, locks
}

// BenchmarkInterleavedUncontended: one goroutine acquires and releases one
// name, again and again, with each lock in turn: blocks of 200 pairs, b.N
// rounds. It reports each lock's rate over the baselines' (redislock, the
// seed lock, the floor, and the old lock when built with it), median of
// the rounds, and the Redis commands each lock ran, and what they cost
// redis-server, per acquire and release. The floor (floorLock) bounds
// the rate of a lock whose token comes from the server's clock.
func BenchmarkInterleavedUncontended(b *testing.B) {
	srv := redistest.Start(b)
	names, locks := uncontendedImpls(b, srv)
	ctx := context.Background()
	once := func(l contention.Lock) {
		release, ok, err := l.Acquire(ctx)
		if err != nil || !ok {
			b.Fatalf("acquire: %v %v", ok, err)
		}
		release()
	}
	// Warm up (the scripts load), then count each lock's commands.
	cmds := map[string]float64{}
	for _, name := range names {
		for range 100 {
			once(locks[name])
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
	// Each block's rate, and what redis-server spent on it per acquire and
	// release (INFO, read outside the timed loop): its process CPU, and the
	// µs inside commands, where a script's inner commands count twice
	// (inside EVALSHA and on their own), for every lock alike.
	rates, cpu, inside := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
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
			d := after.Sub(before)
			cpu[name] = append(cpu[name], float64(d.CPU.Nanoseconds())/1e3/block)
			inside[name] = append(inside[name], float64(d.Usec)/block)
		}
	}
	b.StopTimer()
	var rows []string
	for _, name := range names {
		row := fmt.Sprintf("%-10s %8.0f acq/s  %4.1f commands  redis %4.1f µs CPU, %4.1f µs in commands", name, median(rates[name]), cmds[name], median(cpu[name]), median(inside[name]))
		for _, base := range []string{"redislock", "seed", "floor", "old"} {
			if rates[base] == nil {
				continue
			}
			r := medianRatio(rates[name], rates[base])
			row += fmt.Sprintf("  ×%s %.3f (%.3f–%.3f)", base, r[1], r[0], r[2])
			if base == "redislock" || (base == "old" && name == "lock") || (base == "floor" && name == "lock") {
				b.ReportMetric(r[1], name+"/"+base)
			}
		}
		rows = append(rows, row)
	}
	b.Logf("%d rounds of %d acquire+release per lock; median rate, commands per acquire+release, redis-server's CPU and time in commands per acquire+release (medians), and the rate's ratio to each baseline in the same round, median (quartiles):\n%s",
		b.N, block, strings.Join(rows, "\n"))
}

// BenchmarkInterleavedContended: one hot key, fought over by g goroutines
// spread over two "processes", each holding it 200 µs (as
// BenchmarkContended), with the lock and the old lock in turn, b.N rounds
// of 2,000 acquisitions each. It reports each one's efficiency, owner
// switches, wait p99 and timeouts, median of the rounds, and the lock's
// efficiency over the old lock's in the same round. Without the old lock
// it runs the lock alone.
func BenchmarkInterleavedContended(b *testing.B) {
	srv := redistest.Start(b)
	impls := []string{"lock"}
	if oldLock != nil {
		impls = append(impls, "old")
	}
	for _, g := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			locks := map[string][]contention.Lock{}
			for _, name := range impls {
				for range 2 {
					c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
					b.Cleanup(func() { _ = c.Close() })
					if name == "old" {
						locks[name] = append(locks[name], oldLock(b, c))
						continue
					}
					l, err := lock.New(c, lock.Options{TTL: ttl, WaitTimeout: wait})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = l.Close() })
					locks[name] = append(locks[name], contention.Ours(l, "hot"))
				}
			}
			type figures struct{ eff, switches, p99, timeouts []float64 }
			got := map[string]*figures{}
			for _, name := range impls {
				got[name] = &figures{}
			}
			const holds = 2000
			b.ResetTimer()
			for round := range b.N {
				for i := range impls {
					name := impls[(i+round)%len(impls)]
					r, err := contention.Run(context.Background(), locks[name], g, holds, hold)
					if err != nil {
						b.Fatal(err)
					}
					f := got[name]
					f.eff = append(f.eff, 100*float64(r.Holds)/r.Elapsed.Seconds()*r.Hold.Seconds())
					f.switches = append(f.switches, 100*float64(r.Switches)/float64(max(r.Holds-1, 1)))
					f.p99 = append(f.p99, float64(contention.Percentile(r.Waits, 99))/float64(time.Millisecond))
					f.timeouts = append(f.timeouts, float64(r.Timeouts))
				}
			}
			b.StopTimer()
			var rows []string
			for _, name := range impls {
				f := got[name]
				row := fmt.Sprintf("%-5s efficiency %5.1f%%  owner switches %5.1f%% (min %5.1f%%)  wait p99 %6.1f ms  timeouts %3.0f (max %3.0f)",
					name, median(f.eff), median(f.switches), slices.Min(f.switches), median(f.p99), median(f.timeouts), slices.Max(f.timeouts))
				if name == "lock" && got["old"] != nil {
					r := medianRatio(f.eff, got["old"].eff)
					p := medianRatio(f.p99, got["old"].p99)
					row += fmt.Sprintf("  efficiency ×old %.3f (%.3f–%.3f)  wait p99 ×old %.3f (%.3f–%.3f)", r[1], r[0], r[2], p[1], p[0], p[2])
					b.ReportMetric(r[1], "eff-lock/old")
				}
				b.ReportMetric(median(f.eff), "eff%-"+name)
				rows = append(rows, row)
			}
			b.Logf("%d rounds of %d acquisitions per lock, %d goroutines in 2 processes, medians:\n%s", b.N, holds, g, strings.Join(rows, "\n"))
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

// medianRatio is the quartiles and median of a[i]/b[i], the ratios of
// two figures measured in the same round.
func medianRatio(a, b []float64) [3]float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	sort.Float64s(r)
	return [3]float64{r[len(r)/4], r[len(r)/2], r[3*len(r)/4]}
}
