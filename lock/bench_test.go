package lock_test

import (
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
			contention.BenchUncontended(b, instances(b, srv, impl)[0])
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
				contention.BenchContended(b, instances(b, srv, impl), n, benchHold)
			})
		}
	}
}
