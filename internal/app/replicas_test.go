package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// Two replicas, 1,000 distinct buyers at once, 100 items: exactly 100 sold.
func TestTwoReplicasThousandBuyers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale")
	}
	pgtest.EachDB(t, func(t *testing.T, db string) {
		c := newClusterOn(t, db)
		// A long wait so that every buyer gets an answer on the merits; 503s
		// would be allowed, but would make the count of 201s depend on timing.
		edit := func(cfg *app.Config) { cfg.LockWait = time.Minute }
		a, b := c.replica(edit), c.replica(edit)
		id := createProduct(t, a.Handler(), 100)

		statuses := rush(id, 1000, a, b)
		t.Logf("statuses: %v", statuses)

		if statuses[http.StatusCreated] != 100 {
			t.Errorf("201s: got %d, want 100 (statuses %v)", statuses[http.StatusCreated], statuses)
		}
		for status, n := range statuses {
			if status != http.StatusCreated && status != http.StatusConflict && status != http.StatusServiceUnavailable {
				t.Errorf("got %d responses with status %d, want only 201, 409 and 503", n, status)
			}
		}
		p := getProduct(t, b.Handler(), id)
		orders := allOrders(t, a.Handler(), id)
		if p.Stock != 0 || p.Sold != 100 || len(orders) != 100 || len(orders) != statuses[http.StatusCreated] {
			t.Errorf("got stock %d, sold %d, %d orders, %d 201s; want 0, 100, 100, 100",
				p.Stock, p.Sold, len(orders), statuses[http.StatusCreated])
		}
		users := map[string]bool{}
		for i, o := range orders {
			if users[o.UserID] {
				t.Errorf("user %s bought twice", o.UserID)
			}
			users[o.UserID] = true
			// Fences never go back: the orders of one batch share its holder's
			// token, and each later batch was written by a newer holder.
			if i > 0 && o.Fence < orders[i-1].Fence {
				t.Errorf("order %d has fence %d, below the previous order's %d", o.ID, o.Fence, orders[i-1].Fence)
			}
		}
		created := a.Metrics().Purchases("created") + b.Metrics().Purchases("created")
		if created != 100 {
			t.Errorf("created purchases counted: got %d, want 100", created)
		}
	})
}

// A restock after a sell-out is seen by both replicas at once: the
// sold-out fast path reads the shared database, there is no cache.
func TestRestockOnBothReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale")
	}
	c := newCluster(t)
	a, b := c.replica(nil), c.replica(nil)
	id := createProduct(t, a.Handler(), 1)
	if status, body := buy(a.Handler(), id, "u1"); status != http.StatusCreated {
		t.Fatalf("first purchase: got %d %s", status, body)
	}
	for i, r := range []*app.Server{a, b} {
		if status, body := buy(r.Handler(), id, "u2"); status != http.StatusConflict {
			t.Fatalf("replica %d after sell-out: got %d %s, want 409 sold_out", i, status, body)
		}
	}
	if _, err := api(b.Handler()).Restock(context.Background(), id, 2); err != nil {
		t.Fatalf("restock on b: %v", err)
	}
	if status, body := buy(a.Handler(), id, "u2"); status != http.StatusCreated {
		t.Errorf("a after restock on b: got %d %s, want 201", status, body)
	}
	if status, body := buy(b.Handler(), id, "u3"); status != http.StatusCreated {
		t.Errorf("b after restock: got %d %s, want 201", status, body)
	}
	for i, r := range []*app.Server{a, b} {
		if status, body := buy(r.Handler(), id, "u4"); status != http.StatusConflict {
			t.Errorf("replica %d after the restock sold out: got %d %s, want 409", i, status, body)
		}
	}
	if p := getProduct(t, a.Handler(), id); p.Stock != 0 || p.Sold != 3 {
		t.Errorf("got stock %d sold %d, want 0 and 3", p.Stock, p.Sold)
	}
}
