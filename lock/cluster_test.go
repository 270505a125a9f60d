package lock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// The lock works through a Cluster client: every key of a lock carries the
// same hash tag, so each multi-key script runs in one slot, and grants
// published from a script reach subscribers through the cluster bus. One
// node owning all 16384 slots is a real Redis Cluster to the client.
func TestWorksOnRedisCluster(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+t.Name()+".conf")
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the cluster to be ok", func() bool {
		return strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:ok")
	})
	for _, k := range []string{"lock:{item:7}", "lock:{item:7}:fence", "lock:{item:7}:queue", "lock:{item:7}:waiters", "lock:{item:7}:tombstone:x"} {
		if got, want := admin.ClusterKeySlot(ctx, k).Val(), admin.ClusterKeySlot(ctx, "item:7").Val(); got != want {
			t.Errorf("%s is in slot %d, want the slot of its hash tag, %d", k, got, want)
		}
	}

	var lockers []*lock.Locker
	for range 2 {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
		t.Cleanup(func() { _ = c.Close() })
		l := newLockerOn(t, c, lock.Options{RecheckInterval: time.Minute, WaitTimeout: 10 * time.Second})
		lockers = append(lockers, l)
	}
	// The re-check is a minute away, so only grants published by releases
	// can wake the waiters: this exercises Pub/Sub through the cluster.
	first := mustAcquire(t, lockers[0], "item:7")
	var wg sync.WaitGroup
	var last int64
	var mu sync.Mutex
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := lockers[i%2].Acquire(ctx, "item:7")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if lk.Token() <= last {
				t.Errorf("token %d after %d", lk.Token(), last)
			}
			last = lk.Token()
			mu.Unlock()
			if err := lk.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	eventually(t, 5*time.Second, "the waiters to queue", func() bool {
		return lockers[0].Waiting("item:7")+lockers[1].Waiting("item:7") == 8
	})
	release(t, first)
	wg.Wait()
}
