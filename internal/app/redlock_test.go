package app_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/faultproxy"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// REDIS_ADDRS: two replicas lock with Redlock over three masters, one of
// them down from the start. Exactly the stock is sold.
func TestRedlockReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale on three Redis servers")
	}
	c := newCluster(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.Start(t).Addr())
	}
	down := redistest.Start(t)
	_ = down.Stop()
	addrs[2] = down.Addr() // a minority may be down
	edit := func(cfg *app.Config) {
		cfg.RedisAddrs = addrs
		cfg.LockWait = time.Minute
	}
	a, b := c.replica(edit), c.replica(edit)
	if status, body := call(a.Handler(), http.MethodGet, "/readyz", ""); status != http.StatusOK {
		t.Fatalf("readyz with 2 of 3 masters: %d %s", status, body)
	}
	id := createProduct(t, a.Handler(), 30)
	statuses := rush(id, 200, a, b)
	p := getProduct(t, b.Handler(), id)
	orders := allOrders(t, a.Handler(), id)
	if statuses[http.StatusCreated] != 30 || p.Stock != 0 || p.Sold != 30 || len(orders) != 30 {
		t.Fatalf("got %v, stock %d, sold %d, %d orders; want 30 sold", statuses, p.Stock, p.Sold, len(orders))
	}
	for i := 1; i < len(orders); i++ {
		if orders[i].Fence < orders[i-1].Fence { // equal within a batch
			t.Errorf("order %d: fence %d below %d", orders[i].ID, orders[i].Fence, orders[i-1].Fence)
		}
	}
}

func TestRedlockNeedsAQuorumAtStart(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	up := redistest.Start(t)
	d1, d2 := redistest.Start(t), redistest.Start(t)
	_, _ = d1.Stop(), d2.Stop()
	cfg := c.config(func(cfg *app.Config) { cfg.RedisAddrs = []string{up.Addr(), d1.Addr(), d2.Addr()} })
	if s, err := app.NewServer(t.Context(), cfg, nil); err == nil {
		_ = s.Close()
		t.Fatal("NewServer succeeded with 1 of 3 Redlock masters up")
	}
}

// REDLOCK_NODE_TIMEOUT reaches the lock: with two of three masters
// answering in 120 ms or more (60 ms each way, through a proxy), the
// default node timeout (TTL/100, at most 50 ms) counts them as failed and
// the purchase wins no quorum; a 1 s node timeout waits for them, and the
// purchase sells. (A lower bound on the slow nodes' answers, and an upper
// one on nothing: no machine speed turns the first case into a sale.)
func TestRedlockNodeTimeout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: Redlock on three Redis servers, two behind slow links")
	}
	c := newCluster(t)
	addrs := []string{redistest.Start(t).Addr()}
	for range 2 {
		p, err := faultproxy.Start(redistest.Start(t).Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		p.SetLatency(60 * time.Millisecond)
		addrs = append(addrs, p.Addr())
	}
	for _, tt := range []struct {
		timeout time.Duration
		want    int
	}{
		{0, http.StatusServiceUnavailable},
		{time.Second, http.StatusCreated},
	} {
		t.Run(fmt.Sprint("REDLOCK_NODE_TIMEOUT=", tt.timeout), func(t *testing.T) {
			s := c.replica(func(cfg *app.Config) {
				cfg.RedisAddrs, cfg.RedlockNodeTimeout = addrs, tt.timeout
				cfg.LockTTL, cfg.LockWait = 5*time.Second, time.Second
			})
			id := createProduct(t, s.Handler(), 1)
			if status, body := buy(s.Handler(), id, fmt.Sprint("u-", tt.timeout)); status != tt.want {
				t.Errorf("purchase: got %d %s, want %d", status, body, tt.want)
			}
		})
	}
}
