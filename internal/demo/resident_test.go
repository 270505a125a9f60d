package demo

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// residentProducts is how many products TestQuietReplicasKeepNoProduct
// sells: enough that state kept per product stands out from state kept per
// replica.
const residentProducts = 300

// perProduct marks a key kind of which every product sold leaves one key.
const perProduct = -1

// redisLeftovers are the kinds of key (keyKind) each design leaves in
// Redis once a sale of new products is over and the replicas are quiet,
// with how many keys of each: perProduct, or a fixed number. A kind not
// listed is a leak; so is a per-product kind whose count is not the
// products sold.
//
//   - lock:{product:<n>}:fence: the lock package's fence counter, the last
//     fencing token issued for the lock name, kept for lock.Options.FenceTTL
//     (24 h by default) after the last acquisition, so that tokens keep
//     growing even if the server's clock steps back a little.
//   - {seckill-counter:<db>}:product:<n> and :buyers:<n>: the counter
//     designs' stock counter (a hash) and buyer set, kept for good: they
//     are where those designs decide.
//   - {seckill-counter:<db>}:orders: redis-counter-async's queue of orders
//     (a stream), one per database.
//   - seckill:dashboard:<n>: the dashboard's hash of one second, which has
//     fields per product sold in that second (orders, stock, sold); it
//     expires dashboard.KeyTTL (10 min) after the second. Its count is the
//     seconds of the sale, so it is not checked.
var redisLeftovers = map[string]map[string]int{
	"lock": {
		"lock:{product:<n>}:fence": perProduct,
	},
	"conditional": {}, // no Redis at all: its dashboard is in memory
	"redis-counter": {
		"{seckill-counter:<db>}:product:<n>": perProduct,
		"{seckill-counter:<db>}:buyers:<n>":  perProduct,
	},
	"redis-counter-async": {
		"{seckill-counter:<db>}:product:<n>": perProduct,
		"{seckill-counter:<db>}:buyers:<n>":  perProduct,
		"{seckill-counter:<db>}:orders":      1,
	},
}

// dashboardKind is the dashboard's key kind: present after any sale with
// Redis, one key per second of it.
const dashboardKind = "seckill:dashboard:<n>"

// TestQuietReplicasKeepNoProduct sells residentProducts new products once
// each through 2 replicas, in every design, waits until the replicas are
// quiet, and checks what is left: in the replicas' memory, no queue of the
// lock design's service and no lock name in the Locker (app.Resident:
// state kept per product would grow with every product a long-running
// replica ever sold); in Redis, exactly the kinds of key redisLeftovers
// lists, each per-product kind once per product sold. A new kind of key,
// or a kind left for some products only (a lease not released, a queue
// not emptied), fails it.
func TestQuietReplicasKeepNoProduct(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts redis-server and sells a few hundred products per design")
	}
	for _, d := range benchDesigns {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			rds := benchRedis(t)
			c := benchCluster(t, rds, d.edit)
			ids, took := createProducts(t, c, residentProducts, 1)
			sold := sellEachOnce(t, c, ids, 32)
			t.Logf("created %d products in %v, sold each once in %v", len(ids), took.Round(time.Millisecond), sold.Round(time.Millisecond))

			want := map[string]int{}
			for kind, n := range redisLeftovers[d.name] {
				if n == perProduct {
					n = len(ids)
				}
				want[kind] = n
			}
			var resident []app.Resident
			var kinds map[string]int
			var queued int64
			quiet := func() (bool, error) {
				resident = resident[:0]
				for _, s := range c.servers {
					resident = append(resident, s.Resident())
				}
				var err error
				if kinds, err = keyKinds(context.Background(), rds.addr); err != nil {
					return false, err
				}
				delete(kinds, dashboardKind)
				if queued, err = queuedOrders(context.Background(), rds.addr); err != nil {
					return false, err
				}
				return queued == 0 && !slices.ContainsFunc(resident, func(r app.Resident) bool { return r != app.Resident{} }) &&
					maps.Equal(kinds, want), nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := poll.Until(ctx, 20*time.Millisecond, quiet); err != nil {
				t.Fatalf("after selling %d products once each, the replicas did not become quiet: %v\n"+
					"got in memory %+v, want every count 0\ngot Redis keys by kind %v\nwant %v (besides %s)\ngot %d orders queued, not written, want 0",
					len(ids), err, resident, kinds, want, dashboardKind, queued)
			}
			t.Logf("left in Redis by kind (besides %s): %v", dashboardKind, kinds)
		})
	}
}

var (
	counterTagRE = regexp.MustCompile(`\{seckill-counter:[^}]*\}`)
	numberRE     = regexp.MustCompile(`[0-9]+`)
)

// keyKind is a Redis key with its numbers written <n> and the counter
// designs' database id <db>: lock:{product:<n>}:fence.
func keyKind(key string) string {
	key = counterTagRE.ReplaceAllLiteralString(key, "{seckill-counter:<db>}")
	return numberRE.ReplaceAllLiteralString(key, "<n>")
}

// keyKinds counts the keys of the Redis at addr by kind (keyKind).
func keyKinds(ctx context.Context, addr string) (map[string]int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	kinds := map[string]int{}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		kinds[keyKind(iter.Val())]++
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("scan the keys of %s: %w", addr, err)
	}
	return kinds, nil
}

// queuedOrders is how many orders redis-counter-async's queues in the
// Redis at addr hold, not yet written to the database: 0 once its writers
// are done.
func queuedOrders(ctx context.Context, addr string) (int64, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "{seckill-counter:*}:orders").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		l, err := rdb.XLen(ctx, k).Result()
		if err != nil {
			return 0, err
		}
		n += l
	}
	return n, nil
}
