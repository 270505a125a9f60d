package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

func TestParseConfigDesign(t *testing.T) {
	cfg, err := app.ParseConfig("serve", nil, envOf(nil), io.Discard)
	if err != nil || cfg.Design != app.DesignLock {
		t.Fatalf("default design: got %q, %v; want lock", cfg.Design, err)
	}
	cfg, err = app.ParseConfig("serve", []string{"-design", "Redis-Counter-Async", "-order-claim-idle", "3s"},
		envOf(map[string]string{"DESIGN": "conditional"}), io.Discard)
	if err != nil || cfg.Design != app.DesignCounterAsync || cfg.OrderClaimIdle != 3*time.Second {
		t.Fatalf("-design over DESIGN: got %q, %v, %v; want redis-counter-async and 3s", cfg.Design, cfg.OrderClaimIdle, err)
	}
	for _, tt := range []struct {
		env  map[string]string
		want string // in the error
	}{
		{map[string]string{"DESIGN": "mutex"}, `design "mutex": want lock, conditional, redis-counter, redis-counter-async`},
		{map[string]string{"DESIGN": "conditional", "LOCK": "none"}, "LOCK=none is a lock mode of the lock design"},
		{map[string]string{"DESIGN": "redis-counter", "UNSAFE_NO_FENCE": "true"}, "UNSAFE_NO_FENCE"},
		{map[string]string{"DESIGN": "redis-counter", "REDIS_ADDRS": "a:1,b:2,c:3"}, "not in a Redlock"},
		{map[string]string{"DESIGN": "redis-counter-async", "ORDER_CLAIM_IDLE": "0s"}, "order claim idle"},
	} {
		if _, err := app.ParseConfig("serve", nil, envOf(tt.env), io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("env %v: got %v, want an error with %q", tt.env, err, tt.want)
		}
	}
	// A conditional sale needs no Redis at all.
	if _, err := app.ParseConfig("serve", []string{"-design", "conditional", "-redis-addr", ""}, envOf(nil), io.Discard); err != nil {
		t.Errorf("conditional without a Redis address: %v", err)
	}
	if _, err := app.ParseConfig("serve", []string{"-design", "redis-counter", "-redis-addr", ""}, envOf(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "no Redis for the stock counters") {
		t.Errorf("redis-counter without a Redis address: got %v, want it refused", err)
	}
}

// Every design serves the same API: a sale through two replicas of each
// sells the stock exactly, on SQLite and PostgreSQL. The async design's
// 201s are orders once a replica has shut down: Close writes what is
// queued.
func TestDesignsServeTheSale(t *testing.T) {
	for _, design := range []app.Design{app.DesignConditional, app.DesignCounter, app.DesignCounterAsync} {
		t.Run(string(design), func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				c := newClusterOn(t, db)
				edit := func(cfg *app.Config) { cfg.Design = design }
				a, b := c.replica(edit), c.replica(edit)
				const stock = 20
				id := createProduct(t, a.Handler(), stock)
				statuses := rush(id, 60, a, b)
				if statuses[http.StatusCreated] != stock || statuses[http.StatusConflict] != 60-stock {
					t.Errorf("statuses: got %v, want %d 201s and %d 409s", statuses, stock, 60-stock)
				}
				if p := getProduct(t, b.Handler(), id); p.Stock != 0 || p.Sold != stock {
					t.Errorf("product: got %+v, want stock 0, sold %d", p, stock)
				}
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				// A replica that starts after both stopped reads every order.
				if got := len(allOrders(t, c.replica(edit).Handler(), id)); got != stock {
					t.Errorf("orders after both replicas stopped: got %d, want %d", got, stock)
				}
			})
		})
	}
}

// Readiness checks what the design uses: the conditional design is ready
// with no Redis at all, the counter designs are not ready without theirs.
func TestDesignReadiness(t *testing.T) {
	c := newCluster(t)
	cond := c.replica(func(cfg *app.Config) { cfg.Design = app.DesignConditional; cfg.RedisAddr = "" })
	ctr := c.replica(func(cfg *app.Config) { cfg.Design = app.DesignCounter })
	if code, body := call(ctr.Handler(), http.MethodGet, "/readyz", ""); code != http.StatusOK {
		t.Fatalf("redis-counter with Redis up: got %d %s", code, body)
	}
	if err := c.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, body := call(ctr.Handler(), http.MethodGet, "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("redis-counter with Redis down: got %d %s, want 503", code, body)
	}
	if code, body := call(cond.Handler(), http.MethodGet, "/readyz", ""); code != http.StatusOK {
		t.Errorf("conditional with Redis down: got %d %s, want 200", code, body)
	}
	// And it sells.
	id := createProduct(t, cond.Handler(), 1)
	if status, msg := buy(cond.Handler(), id, "alice"); status != http.StatusCreated {
		t.Errorf("conditional purchase with Redis down: got %d %s", status, msg)
	}
}

// Close writes the orders still queued: here the replica's writer is
// stalled on its first batch (one order) while nine more are promised, and
// only the flush after it stops can write those.
func TestAsyncCloseWritesTheQueue(t *testing.T) {
	c := newCluster(t)
	var calls atomic.Int32
	srv := c.replica(func(cfg *app.Config) {
		cfg.Design = app.DesignCounterAsync
		cfg.Chaos = func(ctx context.Context, _ []int64) {
			if calls.Add(1) == 1 {
				<-ctx.Done() // the first batch, until Close stops the writer
			}
		}
	})
	id := createProduct(t, srv.Handler(), 10)
	if status, msg := buy(srv.Handler(), id, "u0"); status != http.StatusCreated {
		t.Fatalf("u0: %d %s", status, msg)
	}
	poll.Eventually(t, 10*time.Second, "the writer to hold u0's order", func() bool { return srv.Metrics().OrdersPendingNow() == 1 })
	for i := 1; i < 10; i++ {
		if status, msg := buy(srv.Handler(), id, fmt.Sprintf("u%d", i)); status != http.StatusCreated {
			t.Fatalf("u%d: %d %s", i, status, msg)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(allOrders(t, c.replica(nil).Handler(), id)); got != 10 {
		t.Errorf("orders after Close: got %d, want 10", got)
	}
}

// PAY_WINDOW is a setting of the designs with reservations, and refused,
// with the reason, with the one that has none.
func TestPayWindowDesigns(t *testing.T) {
	for _, tt := range []struct {
		design app.Design
		want   string // in the error; "" for none
	}{
		{app.DesignLock, ""},
		{app.DesignConditional, ""},
		{app.DesignCounter, ""},
		{app.DesignCounterAsync, "answers 201 before the order exists"},
	} {
		env := envOf(map[string]string{"DESIGN": string(tt.design), "PAY_WINDOW": "15m"})
		cfg, err := app.ParseConfig("serve", nil, env, io.Discard)
		switch {
		case tt.want == "" && (err != nil || cfg.PayWindow != 15*time.Minute):
			t.Errorf("%s with a payment window: got %v, %v; want it taken", tt.design, cfg.PayWindow, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s with a payment window: got %v, want an error with %q", tt.design, err, tt.want)
		}
	}
}

// lifeProduct is a product as the API shows it with a payment window.
type lifeProduct struct {
	Stock, Reserved, Sold int64
}

// lifeOrder is an order as the API shows it with a payment window.
type lifeOrder struct {
	ID        int64     `json:"id"`
	UserID    string    `json:"user_id"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expires_at"`
	ClosedAt  time.Time `json:"closed_at"`
}

// reserve is a purchase that must answer 201 with a pending order.
func reserve(t *testing.T, h http.Handler, id int64, user string) lifeOrder {
	t.Helper()
	var out struct{ Order lifeOrder }
	in := map[string]string{"user_id": user}
	if err := api(h).Do(context.Background(), "purchase", http.MethodPost, fmt.Sprintf("/api/v1/products/%d/purchase", id), in, &out); err != nil {
		t.Fatal(err)
	}
	if out.Order.State != "pending" || out.Order.ExpiresAt.IsZero() {
		t.Fatalf("%s's order: %+v, want pending with a window", user, out.Order)
	}
	return out.Order
}

// moveOrder pays or cancels an order through h.
func moveOrder(h http.Handler, verb string, id int64, user string) (lifeOrder, error) {
	var out struct{ Order lifeOrder }
	err := api(h).Do(context.Background(), verb, http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/%s", id, verb), map[string]string{"user_id": user}, &out)
	return out.Order, err
}

// readLife reads a product's stock, reserved and sold through h, and its
// orders.
func readLife(t *testing.T, h http.Handler, id int64) (lifeProduct, map[string]lifeOrder) {
	t.Helper()
	var p lifeProduct
	if err := api(h).Do(context.Background(), "read", http.MethodGet, fmt.Sprintf("/api/v1/products/%d", id), nil, &p); err != nil {
		t.Fatal(err)
	}
	var page struct{ Orders []lifeOrder }
	if err := api(h).Do(context.Background(), "orders", http.MethodGet, fmt.Sprintf("/api/v1/products/%d/orders?limit=100", id), nil, &page); err != nil {
		t.Fatal(err)
	}
	orders := map[string]lifeOrder{}
	for _, o := range page.Orders {
		orders[o.UserID] = o
	}
	return p, orders
}

// The designs with reservations serve their life through the API: a
// purchase reserves, a payment on one replica and a cancel on the other
// move their orders once, and the replicas' own expiry puts the unit of
// the order left to lapse back on sale, with no call asking for it.
func TestDesignsServeReservations(t *testing.T) {
	for _, design := range []app.Design{app.DesignConditional, app.DesignCounter} {
		t.Run(string(design), func(t *testing.T) {
			c := newCluster(t)
			edit := func(cfg *app.Config) { cfg.Design, cfg.PayWindow = design, 2*time.Second }
			a, b := c.replica(edit), c.replica(edit)
			id := createProduct(t, a.Handler(), 3)
			paid, cancelled, lapsed := reserve(t, a.Handler(), id, "payer"), reserve(t, b.Handler(), id, "canceller"), reserve(t, a.Handler(), id, "lapser")
			if p, _ := readLife(t, b.Handler(), id); p != (lifeProduct{Stock: 0, Reserved: 3}) {
				t.Errorf("after three reservations: %+v, want stock 0, reserved 3", p)
			}
			if o, err := moveOrder(a.Handler(), "pay", paid.ID, "payer"); err != nil || o.State != "paid" {
				t.Errorf("pay: got %+v, %v", o, err)
			}
			if o, err := moveOrder(b.Handler(), "cancel", cancelled.ID, "canceller"); err != nil || o.State != "cancelled" {
				t.Errorf("cancel: got %+v, %v", o, err)
			}
			if _, err := moveOrder(a.Handler(), "cancel", cancelled.ID, "canceller"); err == nil || !strings.Contains(err.Error(), "order_cancelled") {
				t.Errorf("cancel again on the other replica: got %v, want 409 order_cancelled", err)
			}
			poll.Eventually(t, 20*time.Second, "the lapsed order expired by a replica", func() bool {
				_, orders := readLife(t, a.Handler(), id)
				return orders["lapser"].State == "expired" && !orders["lapser"].ClosedAt.IsZero()
			})
			p, orders := readLife(t, b.Handler(), id)
			if p != (lifeProduct{Stock: 2, Sold: 1}) || orders["payer"].State != "paid" || orders["canceller"].State != "cancelled" {
				t.Errorf("at the end: %+v, orders %+v; want stock 2, sold 1, paid, cancelled and expired", p, orders)
			}
			if _, err := moveOrder(b.Handler(), "pay", lapsed.ID, "lapser"); err == nil || !strings.Contains(err.Error(), "order_expired") {
				t.Errorf("pay the lapsed order: got %v, want 409 order_expired", err)
			}
			// The users whose orders went may buy again.
			reserve(t, b.Handler(), id, "canceller")
			reserve(t, a.Handler(), id, "lapser")
		})
	}
}

// In redis-counter a cancel waits in the chaos expiry pause (between the
// database's move and the counter's give-back), so the pause is part of a
// request's wait there, and the derived write timeout outlasts it; in the
// other designs only expiries, which no request waits for, make it.
func TestChaosExpiryPauseIsARequestsWaitInRedisCounter(t *testing.T) {
	for _, tt := range []struct {
		design app.Design
		want   time.Duration
	}{
		{app.DesignCounter, 2*time.Second + time.Minute},
		{app.DesignLock, 2 * time.Second},
		{app.DesignConditional, 2 * time.Second},
	} {
		cfg := app.DefaultConfig()
		cfg.Design, cfg.LockWait, cfg.ChaosExpiryPause = tt.design, 2*time.Second, time.Minute
		if got := cfg.RequestWait(); got != tt.want || cfg.HTTPWriteTimeout() <= got {
			t.Errorf("%s: request wait %v, write timeout %v; want a wait of %v, and a longer timeout", tt.design, got, cfg.HTTPWriteTimeout(), tt.want)
		}
	}
}
