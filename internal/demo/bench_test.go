package demo

import (
	"context"
	"crypto/rand"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/loadtest"
)

// The service benchmarks run replicas in this process, as the demo does,
// against a real redis-server, and load them with Vegeta in a closed loop:
// a fixed number of connections, each sending its next request as soon as
// the last one is answered, so the rate measured is what the service
// sustains at that concurrency. Each reports requests/s and the p50 and
// p99 latency of the answers it counts. Compare rows of one run only:
//
//	go test -run '^$' -bench 'HotProduct|CostBySize' -benchtime 5000x -count 3 ./internal/demo
//
// BenchmarkDesigns repeats its table itself (-design-rounds), and
// BenchmarkPostgresSale and BenchmarkQuietProducts do their work once per
// call, whatever b.N: run them with -benchtime 1x, as their docs say.

// benchConns is the load's concurrency: connections in flight, spread
// round-robin over the replicas.
const benchConns = 256

// BenchmarkHotProduct is purchases/s on one product that does not sell
// out, 2 replicas, for one purchase per lock hold and for the default
// batch, on a SQLite file and on PostgreSQL. Every request is a new buyer,
// so every answer should be a 201.
//
// The PostgreSQL server runs on this machine, started by the benchmark;
// each row gets a database of its own on it. Its files are flushed as
// PostgreSQL's defaults have it, except that a commit does not wait for
// its WAL flush (synchronous_commit=off): the SQLite driver is built with
// synchronous=NORMAL in WAL mode, whose commits do not wait either. Both
// may lose the last commits in a crash of the machine, and neither loses
// consistency. The replicas reach the server over loopback TCP, where the
// SQLite file is a library call away.
func BenchmarkHotProduct(b *testing.B) {
	rds := benchRedis(b)
	pg := pgtest.Start(b, pgproc.Options{Durable: true, Settings: map[string]string{"synchronous_commit": "off"}})
	for _, db := range []string{"sqlite", "postgres"} {
		for _, batch := range []int{1, app.DefaultBatchMax} {
			c := benchCluster(b, rds, func(cfg *app.Config) {
				cfg.BatchMax = batch
				// Long enough that every buyer is served, one at a time
				// too: the row measures throughput, not the wait limit.
				cfg.LockWait = time.Minute
				if db == "postgres" {
					cfg.Database = pgtest.NewDatabase(b, pg)
				}
			})
			id := benchProduct(b, c, seckill.MaxStock)
			b.Run(fmt.Sprintf("db=%s/batch=%d", db, batch), func(b *testing.B) {
				closedLoop(b, c, purchaseTarget(c, id), http.StatusCreated)
			})
		}
	}
}

// benchDatabases are the databases the design benchmark runs each design
// on: a SQLite file of the cluster's, and a database of its own on the
// PostgreSQL server the benchmark starts (see BenchmarkHotProduct for its
// settings).
var benchDatabases = []string{"sqlite", "postgres"}

// benchDesigns are the designs BenchmarkDesigns compares, each with the
// configuration it is measured in, which the other many-product benchmark
// and test run too: a new design is a line here.
var benchDesigns = []struct {
	name string
	edit func(*app.Config)
}{
	// The lock with its defaults (64 purchases per lock hold), with a
	// wait long enough that every buyer is served.
	{"lock", func(cfg *app.Config) { cfg.Design, cfg.LockWait = app.DesignLock, time.Minute }},
	{"conditional", func(cfg *app.Config) { cfg.Design = app.DesignConditional }},
	{"redis-counter", func(cfg *app.Config) { cfg.Design = app.DesignCounter }},
	{"redis-counter-async", func(cfg *app.Config) { cfg.Design = app.DesignCounterAsync }},
}

// BenchmarkDesigns' flags. (go test's -count would repeat each row at
// once, not interleave them.)
var (
	benchRounds   = flag.Int("design-rounds", 3, "BenchmarkDesigns: rounds of the whole table, interleaved in time")
	benchSkew     = flag.String("bench-skew", "pow:3", "BenchmarkDesigns: how the purchases spread over the products: uniform, zipf:S or pow:K")
	benchProducts = flag.String("design-products", "1,64,2000", "BenchmarkDesigns: the numbers of products on sale, comma-separated")
)

// BenchmarkDesigns is every design selling many products at once, on
// SQLite and on PostgreSQL, 2 replicas in this process, one redis-server:
// for each number of products (-design-products), purchases/s and the
// latency of the 201s, each request a new buyer of a product drawn with
// the skew (-bench-skew; the default, pow:3, draws product floor(n*u^3)
// for u uniform in [0, 1), so with 2,000 products the hottest gets 8% of
// the demand and the first 250 half of it), every product with
// seckill.MaxStock so that none sells out; then sold-out answers/s and
// their latency, the same way over as many products with no stock. The
// products are created through the API, 64 at a time, before the timed
// part; create-s, on the purchase rows, is how long that took for both
// sets. The skew is printed as a configuration line. The whole table runs
// -design-rounds times, each row on new replicas and a new database, so
// that a busy moment of the shared machine falls on every design alike;
// compare rows of one run, and ratios within one round:
//
//	go test -run '^$' -bench Designs -benchtime 5000x -timeout 60m ./internal/demo -design-rounds 3 | tee designs.txt
//	go run ./internal/demo/testdata/designtable designs.txt
//
// designtable turns the output into the table of bench/README.md: the
// medians of the rounds, each design's ratio to redis-counter and to lock
// of the same round, and the ratios the lock design is measured by.
//
// The async design's 201 comes before its order is written: its rate is
// of answers, and its orders trail them (written by the replicas' writers
// at their own rate, not measured here). The counter designs build a
// product's counter from the database on its first use, inside the timed
// part for the products the warm-up (one request per connection) did not
// draw.
func BenchmarkDesigns(b *testing.B) {
	skew, err := loadtest.ParseSkew(*benchSkew)
	if err != nil {
		b.Fatal(err)
	}
	var counts []int
	for _, f := range strings.Split(*benchProducts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-design-products %q: want positive numbers separated by commas", *benchProducts)
		}
		counts = append(counts, n)
	}
	// A configuration line, as goos: and cpu: are.
	fmt.Printf("skew: %v\n", skew)
	rds := benchRedis(b)
	pg := pgtest.Start(b, pgproc.Options{Durable: true, Settings: map[string]string{"synchronous_commit": "off"}})
	for round := 1; round <= *benchRounds; round++ {
		for _, db := range benchDatabases {
			for _, n := range counts {
				for _, d := range benchDesigns {
					c := benchCluster(b, rds, func(cfg *app.Config) {
						d.edit(cfg)
						if db == "postgres" {
							cfg.Database = pgtest.NewDatabase(b, pg)
						}
					})
					name := fmt.Sprintf("round=%d/db=%s/products=%d/design=%s", round, db, n, d.name)
					open, took := createProducts(b, c, n, seckill.MaxStock)
					soldOut, took2 := createProducts(b, c, n, 0)
					b.Run(name+"/purchase", func(b *testing.B) {
						closedLoop(b, c, skewedTarget(c, open, skew), http.StatusCreated)
						b.ReportMetric((took + took2).Seconds(), "create-s")
					})
					b.Run(name+"/sold-out", func(b *testing.B) {
						closedLoop(b, c, skewedTarget(c, soldOut, skew), http.StatusConflict)
					})
					// Only one design loads the machine at a time.
					c.close(b)
				}
			}
		}
	}
}

// BenchmarkCostBySize is the per-request cost of a product read, a
// sold-out purchase and a locked purchase (stock left) for products with
// 0, 10,000, 100,000 and 1,000,000 orders already in the database, all in
// one database: the cost of a request must not grow with its product's
// orders. The orders are inserted with one SQL statement per product, not
// sold through the API.
func BenchmarkCostBySize(b *testing.B) {
	rds := benchRedis(b)
	c := benchCluster(b, rds, nil)
	type products struct{ soldOut, open int64 }
	sizes := []int{0, 10_000, 100_000, 1_000_000}
	bySize := map[int]products{}
	for _, n := range sizes {
		p := products{soldOut: benchProduct(b, c, 0), open: benchProduct(b, c, seckill.MaxStock)}
		fillOrders(b, c.db, p.soldOut, n)
		fillOrders(b, c.db, p.open, n)
		bySize[n] = p
	}
	for _, n := range sizes {
		p := bySize[n]
		b.Run(fmt.Sprintf("orders=%d/get", n), func(b *testing.B) {
			closedLoop(b, c, getTarget(c, p.soldOut), http.StatusOK)
		})
		b.Run(fmt.Sprintf("orders=%d/sold-out", n), func(b *testing.B) {
			closedLoop(b, c, purchaseTarget(c, p.soldOut), http.StatusConflict)
		})
		b.Run(fmt.Sprintf("orders=%d/purchase", n), func(b *testing.B) {
			closedLoop(b, c, purchaseTarget(c, p.open), http.StatusCreated)
		})
	}
}

// closedLoop sends b.N requests from tr on benchConns connections and
// reports requests/s and the latency of the answers with status want. Any
// other answer fails the benchmark: it would be measuring something else.
func closedLoop(b *testing.B, c *benchSite, tr vegeta.Targeter, want int) {
	b.Helper()
	// An attacker runs one attack: Attack stops it when done.
	attacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(
			vegeta.Client(&http.Client{Transport: c.transport, Timeout: 30 * time.Second}),
			vegeta.Workers(benchConns), vegeta.MaxWorkers(benchConns), vegeta.MaxBody(512))
	}
	// Open the connections first, with requests that are not counted.
	for range attacker().Attack(tr, boundedBench{max: benchConns}, 0, "warm-up") {
	}
	lat := make([]time.Duration, 0, b.N)
	other := map[uint16]int{}
	b.ResetTimer()
	start := time.Now()
	for r := range attacker().Attack(tr, boundedBench{max: uint64(b.N)}, 0, "bench") {
		if r.Code == uint16(want) {
			lat = append(lat, r.Latency)
		} else {
			other[r.Code]++
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if len(other) > 0 || len(lat) != b.N {
		b.Fatalf("%d of %d answers were not %d: %v", b.N-len(lat), b.N, want, other)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// boundedBench paces nothing (every worker sends at once) and stops after
// max requests.
type boundedBench struct{ max uint64 }

func (p boundedBench) Pace(_ time.Duration, hits uint64) (time.Duration, bool) {
	return 0, hits >= p.max
}

func (p boundedBench) Rate(time.Duration) float64 { return 0 }

// benchUser numbers the buyers of every benchmark in this process, so that
// each purchase is a new buyer.
var benchUser atomic.Int64

func purchaseTarget(c *benchSite, id int64) vegeta.Targeter {
	var n atomic.Uint64
	header := http.Header{"Content-Type": []string{"application/json"}}
	return func(t *vegeta.Target) error {
		i := n.Add(1)
		t.Method = http.MethodPost
		t.URL = c.urls[i%uint64(len(c.urls))] + "/api/v1/products/" + strconv.FormatInt(id, 10) + "/purchase"
		t.Body = []byte(`{"user_id":"bench-` + strconv.FormatInt(benchUser.Add(1), 10) + `"}`)
		t.Header = header
		return nil
	}
}

// skewedTarget is purchaseTarget over the products ids, each request for
// a product drawn with skew (ids[0] the hottest), from a fixed seed.
func skewedTarget(c *benchSite, ids []int64, skew loadtest.Skew) vegeta.Targeter {
	var n atomic.Uint64
	var mu sync.Mutex // the picker is not safe for concurrent use
	pick := skew.Picker(len(ids), mrand.New(mrand.NewPCG(1, 2)))
	header := http.Header{"Content-Type": []string{"application/json"}}
	return func(t *vegeta.Target) error {
		i := n.Add(1)
		mu.Lock()
		id := ids[pick()]
		mu.Unlock()
		t.Method = http.MethodPost
		t.URL = c.urls[i%uint64(len(c.urls))] + "/api/v1/products/" + strconv.FormatInt(id, 10) + "/purchase"
		t.Body = []byte(`{"user_id":"bench-` + strconv.FormatInt(benchUser.Add(1), 10) + `"}`)
		t.Header = header
		return nil
	}
}

func getTarget(c *benchSite, id int64) vegeta.Targeter {
	var n atomic.Uint64
	return func(t *vegeta.Target) error {
		i := n.Add(1)
		t.Method = http.MethodGet
		t.URL = c.urls[i%uint64(len(c.urls))] + "/api/v1/products/" + strconv.FormatInt(id, 10)
		return nil
	}
}

func benchRedis(b testing.TB) *redisHandle {
	b.Helper()
	rds, err := startServer(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rds.Close() })
	return rds
}

// benchSite is the replicas under test, their admin token, and the load's
// connections to them, kept open from one sub-benchmark to the next.
type benchSite struct {
	*cluster
	token     string
	transport *http.Transport
}

// benchCluster starts 2 replicas with the default configuration, edited.
func benchCluster(b testing.TB, rds *redisHandle, edit func(*app.Config)) *benchSite {
	b.Helper()
	return benchClusterOf(b, rds, 2, edit)
}

// benchClusterOf starts n replicas with the default configuration, edited.
func benchClusterOf(b testing.TB, rds *redisHandle, n int, edit func(*app.Config)) *benchSite {
	b.Helper()
	cfg := app.DefaultConfig()
	cfg.RedisAddr = rds.addr
	cfg.AdminToken = rand.Text()
	if edit != nil {
		edit(&cfg)
	}
	c, err := startCluster(context.Background(), n, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	site := &benchSite{cluster: c, token: cfg.AdminToken, transport: newBenchTransport()}
	b.Cleanup(func() { site.close(b) })
	return site
}

// newBenchTransport is the load's connections: benchConns per replica.
func newBenchTransport() *http.Transport {
	return &http.Transport{MaxConnsPerHost: benchConns, MaxIdleConnsPerHost: benchConns}
}

// close stops the site's replicas and closes the load's connections, once
// (the cleanup calls it again).
func (c *benchSite) close(b testing.TB) {
	c.transport.CloseIdleConnections()
	if err := c.cluster.Close(); err != nil {
		b.Errorf("stop the replicas: %v", err)
	}
}

// benchProduct creates a product with stock through the API.
func benchProduct(b testing.TB, c *benchSite, stock int64) int64 {
	b.Helper()
	p, err := apiclient.New(http.DefaultClient, c.urls[0], c.token).CreateProduct(context.Background(), "bench", stock)
	if err != nil {
		b.Fatal(err)
	}
	return p.ID
}

// fillOrders inserts n orders for product id straight into the database
// file, in one statement, and sets the product's sold count to match.
func fillOrders(b *testing.B, path string, id int64, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	db, err := sql.Open("sqlite3", path+"?_busy_timeout=5000")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO orders (product_id, user_id, fence, created_at)
		SELECT ?, 'fill-' || i, 0, ? FROM seq`, n, id, time.Now().UTC())
	if err == nil {
		_, err = db.Exec("UPDATE products SET sold = sold + ? WHERE id = ?", n, id)
	}
	if err != nil {
		b.Fatalf("fill %d orders of product %d: %v", n, id, err)
	}
}
