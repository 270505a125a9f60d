package demo

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// Durations of BenchmarkPostgresSale's rows: long enough for a purchase
// rate that falls as the orders table grows to show it, per second.
const (
	saleRun    = 30 * time.Second
	soldOutRun = 10 * time.Second
	rateWindow = 5 * time.Second // the first and the last seconds compared
)

// saleRounds is how many times BenchmarkPostgresSale runs its whole table.
var saleRounds = flag.Int("sale-rounds", 1, "BenchmarkPostgresSale: rounds of the whole table, interleaved in time")

// BenchmarkPostgresSale is the service on PostgreSQL as a new deployment
// meets a flash sale: every row starts replicas on a new database of a
// server started by the benchmark (settings as in BenchmarkHotProduct),
// and loads them for a fixed time, not b.N requests, in a closed loop of
// benchConns connections. The whole table runs -sale-rounds times:
//
//	go test -run '^$' -bench PostgresSale -benchtime 1x ./internal/demo -sale-rounds 3
//
// The rows: purchases by new buyers of a new product with 2 replicas and
// with 1, of the same with the redis-counter design for comparison, and
// of a product that already has 100,000 orders (inserted by one
// statement, with no ANALYZE after it); and sold-out answers to new
// buyers on PostgreSQL and, for comparison, on a SQLite file. The lock's
// wait is long enough that every buyer is served. Each row reports its
// rate over the run, over its first and its last rateWindow (a rate that
// falls with the orders shows as last-5s below first-5s), the latency of
// its answers, the CPU the PostgreSQL server spent, in percent of one
// core, and the entries of the orders table's indexes read per answer
// (idx-entries/req: a lookup whose cost grows with the orders shows there
// whatever the machine's speed). The rate of every second is in the log,
// and so is the autovacuum's work on the orders table.
func BenchmarkPostgresSale(b *testing.B) {
	rds := benchRedis(b)
	pg := pgtest.Start(b, pgproc.Options{Durable: true, Settings: map[string]string{"synchronous_commit": "off"}})
	site := func(b *testing.B, replicas int, database string, design app.Design) *benchSite {
		return benchClusterOf(b, rds, replicas, func(cfg *app.Config) {
			cfg.Database, cfg.Design, cfg.LockWait = database, design, time.Minute
		})
	}
	for round := 1; round <= *saleRounds; round++ {
		name := func(row string) string { return fmt.Sprintf("round=%d/%s", round, row) }
		for _, replicas := range []int{2, 1} {
			b.Run(name(fmt.Sprintf("new-product/replicas=%d", replicas)), func(b *testing.B) {
				c := site(b, replicas, pgtest.NewDatabase(b, pg), app.DesignLock)
				id := benchProduct(b, c, seckill.MaxStock)
				timedLoop(b, c, pg, purchaseTarget(c, id), http.StatusCreated, saleRun)
			})
		}
		b.Run(name("redis-counter/new-product/replicas=2"), func(b *testing.B) {
			c := site(b, 2, pgtest.NewDatabase(b, pg), app.DesignCounter)
			id := benchProduct(b, c, seckill.MaxStock)
			timedLoop(b, c, pg, purchaseTarget(c, id), http.StatusCreated, saleRun)
		})
		b.Run(name("orders=100000/replicas=2"), func(b *testing.B) {
			db := pgtest.NewDatabase(b, pg)
			c := site(b, 2, db, app.DesignLock)
			id := benchProduct(b, c, seckill.MaxStock)
			fillOrdersPostgres(b, db, id, 100_000)
			timedLoop(b, c, pg, purchaseTarget(c, id), http.StatusCreated, saleRun)
		})
		for _, db := range []string{"postgres", "sqlite"} {
			b.Run(name("sold-out/db="+db), func(b *testing.B) {
				database := filepath.Join(b.TempDir(), "seckill.db")
				var server *pgproc.Server
				if db == "postgres" {
					database, server = pgtest.NewDatabase(b, pg), pg
				}
				c := site(b, 2, database, app.DesignLock)
				id := benchProduct(b, c, 0)
				timedLoop(b, c, server, purchaseTarget(c, id), http.StatusConflict, soldOutRun)
			})
		}
	}
}

// timedLoop loads c with tr on benchConns connections for d, after a
// warm-up that opens them, and reports the rate of answers with status
// want over d, over its first and last rateWindow, their p50 and p99, and
// pg's CPU (when pg is not nil). Any other answer fails the benchmark.
func timedLoop(b *testing.B, c *benchSite, pg *pgproc.Server, tr vegeta.Targeter, want int, d time.Duration) {
	b.Helper()
	attacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(
			vegeta.Client(&http.Client{Transport: c.transport, Timeout: 30 * time.Second}),
			vegeta.Workers(benchConns), vegeta.MaxWorkers(benchConns), vegeta.MaxBody(512))
	}
	for range attacker().Attack(tr, boundedBench{max: benchConns}, 0, "warm-up") {
	}
	perSecond := make([]int, int(d/time.Second)+1)
	var lat []time.Duration
	other := map[uint16]int{}
	b.ResetTimer()
	cpu0, cpuOK := serverCPU(b, pg)
	entries0 := orderIndexEntries(b, c.db)
	start := time.Now()
	for r := range attacker().Attack(tr, boundedBench{max: 1 << 62}, d, "timed") {
		if r.Code != uint16(want) {
			other[r.Code]++
			continue
		}
		lat = append(lat, r.Latency)
		if s := int(r.Timestamp.Add(r.Latency).Sub(start) / time.Second); s < len(perSecond) {
			perSecond[s]++
		}
	}
	elapsed := time.Since(start)
	cpu, _ := serverCPU(b, pg)
	cpu -= cpu0
	entries := orderIndexEntries(b, c.db) - entries0
	b.StopTimer()
	if len(other) > 0 || len(lat) == 0 {
		b.Fatalf("%d answers were not %d: %v", len(lat), want, other)
	}
	// The last bucket holds the answers after d, to requests sent before
	// it: not a whole second.
	whole := perSecond[:int(d/time.Second)]
	window := int(rateWindow / time.Second)
	sum := func(s []int) (n int) {
		for _, v := range s {
			n += v
		}
		return n
	}
	first, last := float64(sum(whole[:window]))/rateWindow.Seconds(), float64(sum(whole[len(whole)-window:]))/rateWindow.Seconds()
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(first, "first-5s-req/s")
	b.ReportMetric(last, "last-5s-req/s")
	b.ReportMetric(last/first, "last/first")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	if pg != nil {
		if cpuOK {
			b.ReportMetric(100*cpu.Seconds()/elapsed.Seconds(), "pg-cpu-%")
		} else {
			b.Logf("pg-cpu-%%: not measured: it is read from /proc, on Linux only")
		}
		b.ReportMetric(float64(entries)/float64(len(lat)), "idx-entries/req")
	}
	b.Logf("answers per second: %v", whole)
	if store.IsPostgres(c.db) {
		b.Logf("autovacuum on orders so far: %s", autovacuumRuns(b, c.db))
	}
}

// autovacuumRuns says how often autovacuum has vacuumed and analyzed the
// orders table of the database at url: work of the server's own that a
// row may have shared the machine with.
func autovacuumRuns(b *testing.B, url string) string {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var vacuums, analyzes int64
	if err := conn.QueryRow(ctx, "SELECT autovacuum_count, autoanalyze_count FROM pg_stat_user_tables WHERE relname = 'orders'").Scan(&vacuums, &analyzes); err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("%d vacuum(s), %d analyze(s)", vacuums, analyzes)
}

// orderIndexEntries is how many entries the scans of the orders table's
// indexes have returned so far in the PostgreSQL database at url
// (pg_stat_user_indexes.idx_tup_read), or 0 for a SQLite file. A lookup
// of a buyer who has no order returns none; a scan of a product's orders
// returns all of them. Backends publish their counts about once a second
// while busy, so the last second of a run may be missing.
func orderIndexEntries(b *testing.B, url string) int64 {
	b.Helper()
	if !store.IsPostgres(url) {
		return 0
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'orders'").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// fillOrdersPostgres inserts n orders for product id in one statement,
// and sets the product's sold count to match.
func fillOrdersPostgres(b *testing.B, url string, id int64, n int) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO orders (product_id, user_id, fence, created_at)
		SELECT $1, 'fill-' || i, 0, now() FROM generate_series(1, $2::int) AS i`, id, n)
	if err == nil {
		_, err = conn.Exec(ctx, "UPDATE products SET sold = sold + $1 WHERE id = $2", n, id)
	}
	if err != nil {
		b.Fatalf("fill %d orders of product %d: %v", n, id, err)
	}
}
