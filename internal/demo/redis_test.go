package demo

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock"
)

// The embedded Redis's clock makes leases run out: a holder that never
// releases blocks a second Locker only for its TTL. Without the clock,
// miniredis would keep the key forever and the second Acquire would time
// out.
func TestEmbeddedRedisExpiresLeases(t *testing.T) {
	rds, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rds.Close(); err != nil {
			t.Error(err)
		}
	}()
	const ttl = 50 * time.Millisecond
	var lockers []*lock.Locker
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: rds.addr})
		defer c.Close()
		l, err := lock.New(c, lock.Options{TTL: ttl, DisableRenewal: true, WaitTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lockers = append(lockers, l)
	}
	ctx := context.Background()
	first, err := lockers[0].Acquire(ctx, "stalled")
	if err != nil {
		t.Fatalf("first Acquire: %v", err)
	}
	second, err := lockers[1].Acquire(ctx, "stalled")
	if err != nil {
		t.Fatalf("second Acquire, while the first holder stalls: %v (did its lease not run out?)", err)
	}
	got := time.Now()
	defer second.Release(ctx)
	// The first lease began no earlier than its request was sent, which
	// its Deadline counts from: the embedded clock must not end it sooner.
	// (Timing from the first Acquire's return instead would miss however
	// long that call took on a busy machine.)
	if got.Before(first.Deadline()) {
		t.Errorf("the second holder got in %v before the first lease's deadline (lease %v)", first.Deadline().Sub(got), ttl)
	}
	if second.Token() <= first.Token() {
		t.Errorf("tokens: got %d after %d, want a larger one", second.Token(), first.Token())
	}
}
