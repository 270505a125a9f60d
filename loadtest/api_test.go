package loadtest

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

// TestSnapshotWaitsForTheProductToSettle serves a product whose sold count
// still moves on the first reads, as when a request the client gave up on
// finishes on the server: the snapshot must come from reads that agree.
func TestSnapshotWaitsForTheProductToSettle(t *testing.T) {
	var reads atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/products/1", func(w http.ResponseWriter, r *http.Request) {
		sold := min(reads.Add(1), 3) // 1, 2, then 3 for good
		writeJSON(w, http.StatusOK, Product{ID: 1, Stock: 10 - sold, Sold: sold})
	})
	mux.HandleFunc("GET /api/v1/products/1/orders", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"product_id": 1, "orders": []Order{{ID: 1}, {ID: 2}, {ID: 3}}, "next": nil})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	a := api{apiclient.New(newClient(http.DefaultTransport, 5*time.Second), srv.URL, "")}
	p, orders, _, err := a.snapshot(t.Context(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sold != 3 || len(orders) != 3 || reads.Load() < 4 {
		t.Errorf("got sold %d, %d orders after %d reads; want 3, 3 after at least 4", p.Sold, len(orders), reads.Load())
	}
}

// TestSnapshotSettlesTheOrders serves a product sold 3 times from the start
// whose orders appear one list after the other, as a service that writes
// orders in the background shows them: without settle the snapshot is the
// first consistent product read, with settle it waits for the third order,
// and a settle that runs out returns what there is.
func TestSnapshotSettlesTheOrders(t *testing.T) {
	serve := func(max int64) (*api, *atomic.Int64) {
		var lists atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("GET /api/v1/products/1", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, Product{ID: 1, Stock: 7, Sold: 3})
		})
		mux.HandleFunc("GET /api/v1/products/1/orders", func(w http.ResponseWriter, r *http.Request) {
			n := min(lists.Add(1), max)
			orders := []Order{}
			for i := range n {
				orders = append(orders, Order{ID: i + 1})
			}
			writeJSON(w, http.StatusOK, map[string]any{"product_id": 1, "orders": orders, "next": nil})
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return &api{apiclient.New(newClient(http.DefaultTransport, 5*time.Second), srv.URL, "")}, &lists
	}
	a, _ := serve(3)
	if _, orders, _, err := a.snapshot(t.Context(), 1, 0); err != nil || len(orders) != 1 {
		t.Errorf("without settle: got %d orders, %v; want 1 (the first listing)", len(orders), err)
	}
	a, lists := serve(3)
	if _, orders, _, err := a.snapshot(t.Context(), 1, time.Minute); err != nil || len(orders) != 3 || lists.Load() != 3 {
		t.Errorf("with settle: got %d orders after %d listings, %v; want 3 after 3", len(orders), lists.Load(), err)
	}
	a, _ = serve(2) // the third order never comes
	if _, orders, _, err := a.snapshot(t.Context(), 1, 100*time.Millisecond); err != nil || len(orders) != 2 {
		t.Errorf("settle running out: got %d orders, %v; want 2", len(orders), err)
	}
}

func TestAPIErrorNamesTheProblem(t *testing.T) {
	shop := newFakeShop(false)
	url, _ := shop.serve(t)
	a := api{apiclient.New(newClient(http.DefaultTransport, 5*time.Second), url, "wrong")}
	_, err := a.createProduct(t.Context(), "x", 1)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Code != "unauthorized" || !strings.Contains(err.Error(), "ADMIN_TOKEN") {
		t.Errorf("got %v, want a 401 APIError that points at the token", err)
	}
}
