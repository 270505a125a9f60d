package demo

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// quietProducts is how many products BenchmarkQuietProducts sells once each.
var quietProducts = flag.Int("quiet-products", 100_000, "BenchmarkQuietProducts: products sold once each")

// quietWarmUp is how many products are sold once each before the first
// measure: the first purchases fill what a replica keeps whatever it
// sells (connection pools, prepared statements, the scripts in Redis).
const quietWarmUp = 2_000

// BenchmarkQuietProducts is what selling many products once each leaves
// behind, per product, in each replica's memory and in Redis, for every
// design: 2 replicas on a SQLite file and one redis-server (new for each
// design), quietWarmUp products sold once each, then -quiet-products more.
// After each sale it waits until the sale is over (every order in the
// database, the async design's queue empty) and for the dashboard's last
// write (each second's counts are written within 1.25 s after it ends),
// closes the load's connections, and measures. The metrics are the second
// measure less the first, per product of the second sale:
//
//   - heap-B/product, per replica: the replica's live heap, HeapAlloc right
//     after two garbage collections. The replicas run as processes of
//     their own (this test binary, started by heapReplica), so a heap is
//     one replica's alone and holds nothing of the load; each is asked for
//     its report by SIGUSR1 (ReportHeapOnSignal). Also in the log: heap
//     objects, goroutines, and RSS (which also counts SQLite's page cache,
//     outside Go's heap).
//   - redis-B/product: Redis's used_memory (INFO memory), and
//     redis-keys/product its DBSIZE. The log lists the keys by kind
//     (keyKind), each with its count and bytes (MEMORY USAGE), before and
//     after: which of them stay per product is the finding.
//
// The products are inserted into the database with one statement, not
// created through the API (BenchmarkDesigns' create-s shows the API's
// rate); creating a product writes nothing to Redis or to a replica's
// memory in any design, and the counter designs build a product's
// counter in Redis on its first use, here its one purchase. Run it with
//
//	go test -run '^$' -bench QuietProducts -benchtime 1x -timeout 30m ./internal/demo
func BenchmarkQuietProducts(b *testing.B) {
	for _, d := range benchDesigns {
		b.Run("design="+d.name, func(b *testing.B) {
			rds := benchRedis(b)
			heapDir := b.TempDir()
			c := processCluster(b, rds, heapDir, d.edit)
			ids := insertProducts(b, c.db, quietWarmUp+*quietProducts, 1)
			warm, sale := ids[:quietWarmUp], ids[quietWarmUp:]
			sellEachOnce(b, c, warm, benchConns)
			before := quietMeasure(b, c, rds, heapDir, len(warm))
			b.ResetTimer()
			took := sellEachOnce(b, c, sale, benchConns)
			b.StopTimer()
			after := quietMeasure(b, c, rds, heapDir, len(ids))
			n := float64(len(sale))
			b.Logf("sold %d products once each in %v (%.0f/s)", len(sale), took.Round(time.Millisecond), n/took.Seconds())
			for i := range before.replicas {
				pb, pa := before.replicas[i], after.replicas[i]
				b.ReportMetric((float64(pa.HeapAlloc)-float64(pb.HeapAlloc))/n, fmt.Sprintf("replica%d-heap-B/product", i+1))
				b.Logf("replica %d: live heap %s -> %s (%.1f B/product), heap objects %d -> %d (%.3f/product), goroutines %d -> %d, RSS %s -> %s",
					i+1, mib(int64(pb.HeapAlloc)), mib(int64(pa.HeapAlloc)), (float64(pa.HeapAlloc)-float64(pb.HeapAlloc))/n,
					pb.HeapObjects, pa.HeapObjects, (float64(pa.HeapObjects)-float64(pb.HeapObjects))/n,
					pb.Goroutines, pa.Goroutines, mib(pb.RSS), mib(pa.RSS))
			}
			b.ReportMetric(float64(after.redisUsed-before.redisUsed)/n, "redis-B/product")
			b.ReportMetric(float64(after.redisKeys-before.redisKeys)/n, "redis-keys/product")
			b.Logf("Redis: used_memory %s -> %s (%.1f B/product), DBSIZE %d -> %d",
				mib(before.redisUsed), mib(after.redisUsed), float64(after.redisUsed-before.redisUsed)/n, before.redisKeys, after.redisKeys)
			b.Logf("Redis keys by kind, before -> after: count, bytes (MEMORY USAGE), bytes per product of the sale:\n%s", kindTable(before.kinds, after.kinds, n))
		})
	}
}

// processCluster starts 2 replicas of the default configuration, edited,
// as processes of this test binary that report their heaps into heapDir.
func processCluster(b *testing.B, rds *redisHandle, heapDir string, edit func(*app.Config)) *benchSite {
	b.Helper()
	cfg := app.DefaultConfig()
	cfg.RedisAddr = rds.addr
	cfg.AdminToken = "quiet-products"
	edit(&cfg)
	specs := []replicaSpec{{cfg, heapReplica(heapDir)}, {cfg, heapReplica(heapDir)}}
	cl, err := startReplicas(context.Background(), specs, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	site := &benchSite{cluster: cl, token: cfg.AdminToken, transport: newBenchTransport()}
	b.Cleanup(func() { site.close(b) })
	return site
}

// insertProducts inserts n products with stock into the SQLite file at
// path, in one statement, and returns their ids.
func insertProducts(b *testing.B, path string, n int, stock int64) []int64 {
	b.Helper()
	db, err := sql.Open("sqlite3", path+"?_busy_timeout=5000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var first int64
	if err := db.QueryRow("SELECT coalesce(max(id), 0) + 1 FROM products").Scan(&first); err != nil {
		b.Fatal(err)
	}
	_, err = db.Exec(`WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?)
		INSERT INTO products (id, name, stock, sold, fence, created_at, counter_gen)
		SELECT ? + i, 'quiet-' || i, ?, 0, 0, ?, 0 FROM seq`, n, first, stock, time.Now().UTC())
	if err != nil {
		b.Fatalf("insert %d products: %v", n, err)
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)
	}
	return ids
}

// quietState is one measure of BenchmarkQuietProducts.
type quietState struct {
	replicas  []heapReport
	redisUsed int64
	redisKeys int64
	kinds     map[string]kindSize
}

// kindSize is the keys of one kind: how many, and their bytes.
type kindSize struct{ keys, bytes int64 }

// quietMeasure waits until orders products have their order in the
// database and the async design's queue is empty, then for the
// dashboard's last write, closes the load's connections, and measures
// the replicas and Redis.
func quietMeasure(b *testing.B, c *benchSite, rds *redisHandle, heapDir string, orders int) quietState {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("sqlite3", c.db+"?_busy_timeout=5000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var written int
	var queued int64
	err = poll.Until(ctx, 50*time.Millisecond, func() (bool, error) {
		if err := db.QueryRow("SELECT count(*) FROM orders").Scan(&written); err != nil {
			return false, err
		}
		queued, err = queuedOrders(ctx, rds.addr)
		return written == orders && queued == 0, err
	})
	if err != nil {
		b.Fatalf("waiting for the sale to end: %v (got %d orders written, %d queued; want %d and 0)", err, written, queued, orders)
	}
	// Each second's counts are written within flushEvery after it ends;
	// the connections' server sides end when the load closes them.
	c.transport.CloseIdleConnections()
	t := time.NewTimer(2 * time.Second)
	<-t.C
	var s quietState
	for _, p := range c.processes {
		s.replicas = append(s.replicas, readHeap(b, heapDir, p.proc.Pid()))
	}
	rdb := redis.NewClient(&redis.Options{Addr: rds.addr})
	defer rdb.Close()
	if s.redisUsed, err = usedMemory(ctx, rdb); err != nil {
		b.Fatal(err)
	}
	if s.redisKeys, err = rdb.DBSize(ctx).Result(); err != nil {
		b.Fatal(err)
	}
	if s.kinds, err = kindSizes(ctx, rdb); err != nil {
		b.Fatal(err)
	}
	return s
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

// kindSizes counts the keys by kind (keyKind) and sums their MEMORY USAGE
// (every value sampled).
func kindSizes(ctx context.Context, rdb *redis.Client) (map[string]kindSize, error) {
	kinds := map[string]kindSize{}
	var batch []string
	flush := func() error {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			return err
		}
		for i, cmd := range cmds {
			n, err := cmd.(*redis.IntCmd).Result()
			if err == redis.Nil {
				continue // expired meanwhile
			}
			if err != nil {
				return err
			}
			ks := kinds[keyKind(batch[i])]
			ks.keys++
			ks.bytes += n
			kinds[keyKind(batch[i])] = ks
		}
		batch = batch[:0]
		return nil
	}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	return kinds, flush()
}

// kindTable lists the kinds of key before and after, and the bytes that
// the kinds gained per product of the sale (n products).
func kindTable(before, after map[string]kindSize, n float64) string {
	var sb strings.Builder
	all := slices.Sorted(maps.Keys(after))
	for k := range before {
		if _, ok := after[k]; !ok {
			all = append(all, k)
		}
	}
	for _, k := range all {
		kb, ka := before[k], after[k]
		note := ""
		if k == dashboardKind {
			note = fmt.Sprintf(" (expires %v after its second)", dashboard.KeyTTL)
		}
		fmt.Fprintf(&sb, "  %s: %d -> %d keys (%.3f/product), %s -> %s (%.1f B/product)%s\n",
			k, kb.keys, ka.keys, float64(ka.keys-kb.keys)/n, mib(kb.bytes), mib(ka.bytes), float64(ka.bytes-kb.bytes)/n, note)
	}
	return sb.String()
}

// mib is n bytes in MiB, to a tenth.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
