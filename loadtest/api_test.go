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
	p, orders, _, err := a.snapshot(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sold != 3 || len(orders) != 3 || reads.Load() < 4 {
		t.Errorf("got sold %d, %d orders after %d reads; want 3, 3 after at least 4", p.Sold, len(orders), reads.Load())
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
