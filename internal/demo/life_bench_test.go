package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/loadtest"
)

// BenchmarkLifecycle's flags.
var (
	lifeRounds   = flag.Int("life-rounds", 3, "BenchmarkLifecycle: rounds of the whole table, interleaved in time")
	lifePayShare = flag.Float64("life-pay", 0.7, "BenchmarkLifecycle: share of the buyers who pay")
	lifeFloor    = flag.Bool("life-floor", false, "BenchmarkLifecycle: add mode=floor, whose payments are refused before the service is asked")
)

// BenchmarkLifecycle is a sale whose buyers pay, against the same sale
// with orders final at once: 2 replicas, benchConns connections in a
// closed loop of purchases, each a new buyer of a product drawn with pow:3
// (as BenchmarkDesigns). With a payment window (a minute: nothing expires
// during the run), each order is paid with probability -life-pay, by
// lifePayers other connections that pay the orders as they come, as a
// payment provider's callbacks would: the buyer's next purchase does not
// wait for it. It reports purchases/s (201s per second of the timed
// part), payments/s over the same time and the payments still queued at
// its end (0 when the payments kept up with the purchases; they are made,
// and checked, after the timed part), and the p99 of the purchases, over
// 1 and 2,000 products, on SQLite and PostgreSQL, each row on new replicas
// and a new database, the table -life-rounds times, interleaved:
//
//	go test -run '^$' -bench Lifecycle -benchtime 20000x -timeout 60m ./internal/demo
//
// Compare the two modes of one round: the ratio life/final is the cost of
// the life cycle to the purchases. With -life-floor, a third mode, floor,
// is the life cycle's sale with payments that cost only their HTTP: the
// same requests, each without its user_id, answered 400 by the handler
// before the service is asked. floor/final is what the payments' requests
// cost the purchases on this machine (the load, the replicas and the
// databases share its CPUs) whatever the service does with them; life/floor
// is what the payments' writes cost.
func BenchmarkLifecycle(b *testing.B) {
	skew, err := loadtest.ParseSkew("pow:3")
	if err != nil {
		b.Fatal(err)
	}
	rds := benchRedis(b)
	pg := pgtest.Start(b, pgproc.Options{Durable: true, Settings: map[string]string{"synchronous_commit": "off"}})
	for round := 1; round <= *lifeRounds; round++ {
		for _, db := range benchDatabases {
			for _, n := range []int{1, 2000} {
				modes := []string{"final", "life"}
				if *lifeFloor {
					modes = append(modes, "floor")
				}
				for _, mode := range modes {
					c := benchCluster(b, rds, func(cfg *app.Config) {
						cfg.LockWait = time.Minute
						if mode != "final" {
							cfg.PayWindow = time.Minute
						}
						if db == "postgres" {
							cfg.Database = pgtest.NewDatabase(b, pg)
						}
					})
					ids, _ := createProducts(b, c, n, seckill.MaxStock)
					b.Run(fmt.Sprintf("round=%d/db=%s/products=%d/mode=%s", round, db, n, mode), func(b *testing.B) {
						share := 0.0
						if mode != "final" {
							share = *lifePayShare
						}
						buyAndPay(b, c, ids, skew, share, mode == "floor")
					})
					c.close(b)
				}
			}
		}
	}
}

// lifePayers is how many connections pay the orders of BenchmarkLifecycle.
const lifePayers = 64

// buyAndPay runs b.N purchases on benchConns connections and pays the
// order of each with probability payShare on lifePayers others, and
// reports purchases/s, payments/s, the payments left at the end and the
// p99 of the purchases. An answer other than 201 to a purchase or 200 to
// a payment fails the benchmark; with floor, each payment is sent without
// its user_id and must be answered 400.
func buyAndPay(b *testing.B, c *benchSite, ids []int64, skew loadtest.Skew, payShare float64, floor bool) {
	client := &http.Client{Transport: c.transport, Timeout: 30 * time.Second}
	var mu sync.Mutex
	pick := skew.Picker(len(ids), mrand.New(mrand.NewPCG(1, 2)))
	post := func(url, req string) (int, []byte, error) {
		res, err := client.Post(url, "application/json", bytes.NewReader([]byte(req)))
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return res.StatusCode, body, err
	}
	type toPay struct {
		base, user string
		order      int64
	}
	var paid atomic.Int64
	pay := func(p toPay) error {
		req, want := `{"user_id":"`+p.user+`"}`, http.StatusOK
		if floor {
			req, want = `{"user":"`+p.user+`"}`, http.StatusBadRequest
		}
		code, body, err := post(p.base+"/api/v1/orders/"+strconv.FormatInt(p.order, 10)+"/pay", req)
		if err != nil || code != want {
			return fmt.Errorf("pay: %d %s %v", code, body, err)
		}
		paid.Add(1)
		return nil
	}
	buy := func(i int64, rng *mrand.Rand, payments chan<- toPay) (time.Duration, error) {
		mu.Lock()
		id := ids[pick()]
		mu.Unlock()
		base := c.urls[i%int64(len(c.urls))]
		user := "life-" + strconv.FormatInt(benchUser.Add(1), 10)
		start := time.Now()
		code, body, err := post(base+"/api/v1/products/"+strconv.FormatInt(id, 10)+"/purchase", `{"user_id":"`+user+`"}`)
		took := time.Since(start)
		if err != nil || code != http.StatusCreated {
			return 0, fmt.Errorf("purchase: %d %s %v", code, body, err)
		}
		if rng.Float64() >= payShare {
			return took, nil
		}
		var out struct {
			Order struct{ ID int64 } `json:"order"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			return 0, err
		}
		payments <- toPay{base: base, user: user, order: out.Order.ID}
		return took, nil
	}
	// run makes total purchases and returns their latencies, with the
	// payments made while they ran; the rest are made after, and waited
	// for, by the returned function.
	run := func(total int64) (lat []time.Duration, finish func() (left int, err error), err error) {
		var next atomic.Int64
		payments := make(chan toPay, total)
		var payErr atomic.Pointer[error]
		var payers sync.WaitGroup
		stop := make(chan struct{})
		for range lifePayers {
			payers.Go(func() {
				for {
					select {
					case p := <-payments:
						if err := pay(p); err != nil {
							payErr.CompareAndSwap(nil, &err)
						}
					case <-stop:
						return
					}
				}
			})
		}
		var wg sync.WaitGroup
		lats := make([][]time.Duration, benchConns)
		errs := make([]error, benchConns)
		for w := range benchConns {
			wg.Go(func() {
				rng := mrand.New(mrand.NewPCG(uint64(w), 7))
				for {
					i := next.Add(1)
					if i > total || errs[w] != nil {
						return
					}
					took, err := buy(i, rng, payments)
					if err != nil {
						errs[w] = err
						return
					}
					lats[w] = append(lats[w], took)
				}
			})
		}
		wg.Wait()
		for w := range benchConns {
			if errs[w] != nil {
				err = errs[w]
			}
			lat = append(lat, lats[w]...)
		}
		finish = func() (int, error) {
			close(stop)
			payers.Wait()
			left := len(payments)
			close(payments)
			for p := range payments {
				if err := pay(p); err != nil {
					return left, err
				}
			}
			if e := payErr.Load(); e != nil {
				return left, *e
			}
			return left, nil
		}
		return lat, finish, err
	}
	_, finish, err := run(benchConns) // opens the connections
	if err == nil {
		_, err = finish()
	}
	if err != nil {
		b.Fatal(err)
	}
	paid.Store(0)
	b.ResetTimer()
	start := time.Now()
	lat, finish, err := run(int64(b.N))
	elapsed := time.Since(start)
	paidInTime := paid.Load()
	b.StopTimer()
	left, ferr := finish()
	if err != nil || ferr != nil {
		b.Fatal(errors.Join(err, ferr))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "purchases/s")
	b.ReportMetric(float64(paidInTime)/elapsed.Seconds(), "payments/s")
	b.ReportMetric(float64(left), "pay-backlog")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
