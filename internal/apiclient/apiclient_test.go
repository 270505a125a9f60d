package apiclient_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// An error answer surfaces its status, code and message; a broken client
// that dropped the body would leave Code and Message empty.
func TestErrorCarriesCodeAndMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "sold_out", "message": "product 7 is sold out"})
	}))
	defer srv.Close()
	_, err := apiclient.New(srv.Client(), srv.URL, "").Purchase(t.Context(), 7, "u1")
	e, ok := errors.AsType[*apiclient.Error](err)
	if !ok || e.Status != http.StatusConflict || e.Code != "sold_out" || e.Message != "product 7 is sold out" {
		t.Fatalf("got %#v, want a 409 sold_out Error with its message", err)
	}
	if got, want := err.Error(), "purchase product 7 for u1 on "+srv.URL+": HTTP 409 sold_out: product 7 is sold out"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The admin token goes with writes only.
func TestTokenOnWritesOnly(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.Header.Get("Authorization"))
		writeJSON(w, http.StatusOK, apiclient.Product{ID: 1})
	}))
	defer srv.Close()
	c := apiclient.New(srv.Client(), srv.URL+"/", "tok")
	if _, err := c.Product(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restock(t.Context(), 1, 5); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "GET " || got[1] != "PUT Bearer tok" {
		t.Errorf("got %q, want [GET , PUT Bearer tok]", got)
	}
}

// Orders follows the next cursor to the last page.
func TestOrdersReadsEveryPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		page := map[string]any{"orders": []apiclient.Order{{ID: after + 1}, {ID: after + 2}}, "next": after + 2}
		if after >= 4 {
			page["next"] = nil
		}
		writeJSON(w, http.StatusOK, page)
	}))
	defer srv.Close()
	orders, err := apiclient.New(srv.Client(), srv.URL, "").Orders(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != 6 || orders[5].ID != 6 {
		t.Errorf("got %+v, want orders 1 to 6", orders)
	}
}

// Pay and Cancel post the user to the order's own path and read the order
// back with its state and the edges of its window, as the service writes
// them (microseconds); a client that lost a field, or posted elsewhere,
// would fail here.
func TestPayAndCancelReadTheOrderBack(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			UserID string `json:"user_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		got = append(got, r.Method+" "+r.URL.Path+" "+in.UserID)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"order":{"id":7,"product_id":3,"user_id":"u1","fence":12,"created_at":"2026-01-02T03:04:05.006Z",` +
			`"state":"paid","expires_at":"2026-01-02T03:04:07.006123Z","closed_at":"2026-01-02T03:04:06.5Z"}}`))
	}))
	defer srv.Close()
	c := apiclient.New(srv.Client(), srv.URL, "")
	o, err := c.Pay(t.Context(), 7, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(t.Context(), 7, "u1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Order(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST /api/v1/orders/7/pay u1", "POST /api/v1/orders/7/cancel u1", "GET /api/v1/orders/7 "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got requests %q, want %q", got, want)
	}
	due := time.Date(2026, 1, 2, 3, 4, 7, 6_123_000, time.UTC)
	if o.ID != 7 || o.State != apiclient.StatePaid || !o.ExpiresAt.Equal(due) || o.ClosedAt.Sub(due) != -506123*time.Microsecond {
		t.Errorf("got %+v, want order 7 paid, due at %v, closed 506.123ms before", o, due)
	}
}
