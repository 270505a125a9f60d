package app_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/apitest"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

const adminToken = "test-admin-token"

// TestMain stops the PostgreSQL server that the tests start on first use.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// cluster is one redis-server and one database; each replica built on it
// has its own Gin engine, Redis client, Locker and database handle, as a
// separate process would.
type cluster struct {
	t     *testing.T
	redis *redistest.Server
	db    string
}

// newCluster is a cluster on a new SQLite file.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterOn(t, filepath.Join(t.TempDir(), "seckill.db"))
}

// newClusterOn is a cluster on the database db.
func newClusterOn(t *testing.T, db string) *cluster {
	t.Helper()
	return &cluster{t: t, redis: redistest.Start(t), db: db}
}

// config is the replicas' configuration before edit changes it.
func (c *cluster) config(edit func(*app.Config)) app.Config {
	cfg := app.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.RedisAddr = c.redis.Addr()
	cfg.Database = c.db
	cfg.AdminToken = adminToken
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

func (c *cluster) replica(edit func(*app.Config)) *app.Server {
	c.t.Helper()
	srv, err := app.NewServer(context.Background(), c.config(edit), nil)
	if err != nil {
		c.t.Fatalf("NewServer: %v", err)
	}
	c.t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// call sends one request to h and returns the status and body, for the
// endpoints outside the JSON API (/readyz). It does not touch testing.T,
// so goroutines may use it.
func call(h http.Handler, method, path, body string) (int, string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

// api is the API client of h, with the admin token.
func api(h http.Handler) *apiclient.Client { return apitest.Client(h, adminToken) }

// buy is one purchase: 201 and "" for an order, else the status and the
// error. It does not touch testing.T, so goroutines may use it.
func buy(h http.Handler, id int64, user string) (int, string) {
	_, err := api(h).Purchase(context.Background(), id, user)
	if err == nil {
		return http.StatusCreated, ""
	}
	if e, ok := errors.AsType[*apiclient.Error](err); ok {
		return e.Status, err.Error()
	}
	return 0, err.Error()
}

func createProduct(t *testing.T, h http.Handler, stock int) int64 {
	t.Helper()
	p, err := api(h).CreateProduct(context.Background(), "phone", int64(stock))
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

func getProduct(t *testing.T, h http.Handler, id int64) apiclient.Product {
	t.Helper()
	p, err := api(h).Product(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// allOrders pages through a product's orders with the cursor.
func allOrders(t *testing.T, h http.Handler, id int64) []apiclient.Order {
	t.Helper()
	orders, err := api(h).Orders(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return orders
}

// rush sends one purchase per user at once, user i to replicas[i%len], and
// counts the statuses.
func rush(id int64, users int, replicas ...*app.Server) map[int]int {
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for i := range users {
		wg.Go(func() {
			<-start
			status, _ := buy(replicas[i%len(replicas)].Handler(), id, "user-"+strconv.Itoa(i))
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return statuses
}

// meet returns a chaos hook that holds each lock holder inside the
// critical section until n holders are inside at once, or until wait
// passes. With a lock that works, n never meet and each waits out the
// timeout; with one that does not, they meet, and all of them have read the
// same stock before any writes it: the lost update is certain, not likely.
func meet(n int, wait time.Duration) func(ctx context.Context, _ []int64) {
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	return func(ctx context.Context, _ []int64) {
		mu.Lock()
		if arrived++; arrived == n {
			close(all)
		}
		mu.Unlock()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-all:
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
