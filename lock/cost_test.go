package lock_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// An uncontended acquire and release run these commands in Redis, and no
// others: two scripts; in the acquire (core's), SET NX PX, EXISTS on the
// owner's tombstone, TIME and the token's SET; in the release, GET, EXISTS
// on the line (nobody waits), and DEL. Neither leaves a key behind but the
// fence counter.
func TestUncontendedAcquireReleaseCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	l := newLocker(t, srv, lock.Options{})
	release(t, mustAcquire(t, l, "warm")) // loads the scripts
	before, err := contention.Snapshot(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	release(t, mustAcquire(t, l, "res"))
	after, err := contention.Snapshot(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	got := after.Sub(before).ByName
	want := map[string]int64{"evalsha": 2, "exists": 2, "set": 2, "time": 1, "get": 1, "del": 1}
	if !maps.Equal(got, want) {
		t.Errorf("commands of one uncontended acquire and release: got %v, want %v", got, want)
	}
	if keys := admin.Keys(ctx, lockKey("res")+"*").Val(); len(keys) != 1 || keys[0] != lockKey("res")+":fence" {
		t.Errorf("keys left by an uncontended acquire and release: got %v, want only the fence counter", keys)
	}
}

// Memory is bounded by the names in use, not by every name ever locked:
// after acquisitions and hand-offs over many names, every key left has a
// TTL, and once FenceTTL has passed with no acquisition none is left. The
// control keeps the fence counters forever (FenceTTL negative): one key
// per name stays.
func TestIdleNamesLeaveNoKeys(t *testing.T) {
	t.Parallel()
	keys, persistent := idleNames(t, 200*time.Millisecond)
	if len(persistent) > 0 {
		t.Errorf("keys without a TTL: %v", persistent)
	}
	if keys != 0 {
		t.Errorf("keys left once FenceTTL passed with no acquisition: got %d, want 0", keys)
	}
}

func TestIdleNamesControlCountersKeptForever(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortControl)
	keys, persistent := idleNames(t, -1)
	if keys == 0 || len(persistent) == 0 {
		t.Fatalf("control: with counters kept forever, %d keys are left (%d without a TTL): the test would not catch them", keys, len(persistent))
	}
	t.Logf("control: %d keys left, %d of them without a TTL", keys, len(persistent))
}

// idleNames acquires and releases 20 names, and hands one over between two
// processes, with the given FenceTTL. It returns the keys that have no TTL
// right after, and how many keys are left once every other key expired.
func idleNames(t *testing.T, fenceTTL time.Duration) (left int64, persistent []string) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	opts := lock.Options{TTL: 100 * time.Millisecond, FenceTTL: fenceTTL, RecheckInterval: 10 * time.Millisecond}
	a, b := newLocker(t, srv, opts), newLocker(t, srv, opts)
	for i := range 20 {
		release(t, mustAcquire(t, a, "name"+strings.Repeat("x", i)))
	}
	held := mustAcquire(t, a, "busy")
	got := acquireAsync(t, ctx, b, "busy")
	eventually(t, 5*time.Second, "b to queue", func() bool { return admin.Exists(ctx, lockKey("busy")+":queue").Val() == 1 })
	release(t, held)
	lk := <-got
	if lk == nil {
		t.FailNow()
	}
	release(t, lk)

	for _, k := range admin.Keys(ctx, "*").Val() {
		// -1: no TTL. (-2: the key expired since KEYS listed it.)
		if admin.PTTL(ctx, k).Val() == -1 {
			persistent = append(persistent, k)
		}
	}
	// Wait for every key with a TTL to go.
	eventually(t, max(fenceTTL, 0)+opts.TTL+10*time.Second, "the keys with a TTL to expire", func() bool {
		left = admin.DBSize(ctx).Val()
		return left == int64(len(persistent))
	})
	return left, persistent
}
