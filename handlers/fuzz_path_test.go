package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/store"
)

// validID is the specification of a path id: plain decimal digits, a
// positive int64.
func validID(s string) (int64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0 && len(s) <= 19
}

// smallInt is a query integer: plain digits, at most 9 of them.
func smallInt(s string) (int, bool) {
	if s == "" || len(s) > 9 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// orderParams are the query parameters of GET .../orders and what makes a
// value valid; an absent parameter takes its default. A new parameter is
// one more line.
var orderParams = []struct {
	name  string
	valid func(string) bool
}{
	{"limit", func(s string) bool { n, ok := smallInt(s); return ok && n >= 1 && n <= seckill.MaxOrderLimit }},
	{"offset", func(s string) bool { _, ok := smallInt(s); return ok }},
	{"after", validAfter},
}

// validAfter is the cursor: an order id or 0, plain digits within int64.
func validAfter(s string) bool {
	if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
		return false
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// FuzzPathAndQuery sends a path id and a query string to every route with
// an id, on a real service (SQLite, no lock), and checks: no 5xx; an
// invalid id or query value is a 400 that names it; a refused request
// changes nothing in the database; a valid one reaches the product (200,
// 201, or 409 when sold out; 404 for an id that does not exist).
func FuzzPathAndQuery(f *testing.F) {
	for _, seed := range []struct{ id, query string }{
		{"1", ""}, {"1", "limit=10&offset=0"}, {"2", "limit=1000"}, {"1", "limit=1001"},
		{"1", "limit=0"}, {"1", "offset=-1"}, {"1", "limit=+5"}, {"1", "limit=5&limit=x"},
		{"1", "offset=999999999"}, {"1", "offset=0000000001"}, {"1", "limit=%zz&offset=1"},
		{"1", "limit=1;offset=2"}, {"0", ""}, {"-1", ""}, {"+1", ""}, {"1.0", ""}, {" 1", ""},
		{"9223372036854775807", ""}, {"9223372036854775808", ""}, {"01", "limit="},
		{"abc", "limit=abc"}, {"", ""}, {"1/x", ""}, {"%31", ""}, {"١", ""},
		{"1", "after=0&limit=2"}, {"1", "after=0&offset=3"}, {"1", "after=3&offset=0"},
		{"1", "after=9223372036854775808"}, {"1", "after=-1"}, {"1", "after="},
	} {
		f.Add(seed.id, seed.query)
	}
	dir := f.TempDir()
	cfg := app.DefaultConfig()
	cfg.Lock = app.LockNone
	cfg.Database = filepath.Join(dir, "seckill.db")
	cfg.AdminToken = adminToken
	srv, err := app.NewServer(context.Background(), cfg, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Close() })
	db, err := store.Open(cfg.Database)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	h := srv.Handler()
	// Product 1 has stock for every purchase a run can make; product 2
	// exists but is sold out.
	for _, body := range []string{`{"name":"one","stock":10000000}`, `{"name":"two","stock":0}`} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/api/v1/products", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			f.Fatalf("create product: %d %s", w.Code, w.Body)
		}
	}
	products := func() []*seckill.Product {
		ps, err := db.Products(context.Background())
		if err != nil {
			f.Fatal(err)
		}
		return ps
	}
	buyer := 0

	f.Fuzz(func(t *testing.T, id, query string) {
		id64, idOK := validID(id)
		routable := id != "" && !strings.Contains(id, "/")
		exists := idOK && id64 <= 2
		values, _ := url.ParseQuery(query) // what the handler sees, pairs that parse
		var badParams []string
		for _, p := range orderParams {
			if v, present := values[p.name]; present && !p.valid(v[0]) {
				badParams = append(badParams, p.name)
			}
		}
		// A cursor page cannot also skip by offset.
		if a, cursor := values["after"]; cursor && validAfter(a[0]) {
			if o, present := values["offset"]; present {
				if n, ok := smallInt(o[0]); ok && n != 0 {
					badParams = append(badParams, "offset")
				}
			}
		}
		buyer++
		for _, rt := range []struct {
			method, suffix, query, body string
			ok                          []int // statuses of a valid request for an existing product
		}{
			{"GET", "", "", "", []int{200}},
			{"GET", "/orders", query, "", []int{200}},
			{"POST", "/purchase", "", `{"user_id":"fuzz-` + strconv.Itoa(buyer) + `"}`, []int{201, 409}},
			{"PUT", "/stock", "", `{"stock":10000000}`, []int{200}},
		} {
			// Only the routes that write can change anything.
			writes := rt.method != "GET"
			var before []*seckill.Product
			if writes {
				before = products()
			}
			req := httptest.NewRequest(rt.method, "/", strings.NewReader(rt.body))
			req.URL.Path = "/api/v1/products/" + id + rt.suffix
			req.URL.RawQuery = rt.query
			req.Header.Set("Authorization", "Bearer "+adminToken)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			what := rt.method + " " + req.URL.Path + "?" + rt.query
			var e struct{ Error, Message string }
			_ = json.Unmarshal(w.Body.Bytes(), &e)

			if w.Code >= 500 {
				t.Fatalf("%s: got %d %s", what, w.Code, w.Body)
			}
			if writes && w.Code >= 300 && !reflect.DeepEqual(before, products()) {
				t.Fatalf("%s: refused with %d %s, but the data changed:\nbefore %+v\nafter  %+v", what, w.Code, w.Body, before, products())
			}
			if !routable {
				continue // another route, or none: any 4xx
			}
			bad := []string(nil)
			if !idOK {
				bad = append(bad, "id")
			}
			if rt.suffix == "/orders" {
				bad = append(bad, badParams...)
			}
			switch {
			case len(bad) > 0:
				if w.Code != http.StatusBadRequest || e.Error != "invalid_request" || !namesOneOf(e.Message, bad) {
					t.Fatalf("%s: got %d %s, want 400 invalid_request naming one of %v", what, w.Code, w.Body, bad)
				}
			case !exists:
				if w.Code != http.StatusNotFound {
					t.Fatalf("%s: got %d %s, want 404", what, w.Code, w.Body)
				}
			default:
				if !slices.Contains(rt.ok, w.Code) {
					t.Fatalf("%s: got %d %s, want one of %v", what, w.Code, w.Body, rt.ok)
				}
			}
		}
	})
}

func namesOneOf(message string, fields []string) bool {
	for _, f := range fields {
		if strings.HasPrefix(message, f+": ") {
			return true
		}
	}
	return false
}
