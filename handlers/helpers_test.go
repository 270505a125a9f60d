package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/apitest"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/store"
)

const adminToken = "test-admin-token"

// testAPI is one replica built the way serve builds it, on a real Redis and
// a real SQLite file, plus a second handle on that file to look at the data
// behind the API's back.
type testAPI struct {
	t     *testing.T
	redis *redistest.Server
	srv   *app.Server
	db    *store.Store
}

func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	r := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "seckill.db")
	cfg := app.DefaultConfig()
	cfg.RedisAddr = r.Addr()
	cfg.Database = path
	cfg.AdminToken = adminToken
	cfg.LockWait = 200 * time.Millisecond // the busy test holds the lock
	srv, err := app.NewServer(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &testAPI{t: t, redis: r, srv: srv, db: db}
}

// request is one HTTP request to the API.
type request struct {
	method, path, body string
	token              string // "" for none
	header             map[string]string
	chunked            bool // send the body without a Content-Length
}

// response is what came back, with the JSON body decoded.
type response struct {
	status int
	header http.Header
	raw    string
	json   map[string]any
}

func (a *testAPI) do(r request) response {
	a.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req := httptest.NewRequest(r.method, r.path, body)
	if r.chunked {
		req.ContentLength = -1
		req.Body = io.NopCloser(strings.NewReader(r.body))
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	a.srv.Handler().ServeHTTP(w, req)
	res := response{status: w.Code, header: w.Header(), raw: w.Body.String()}
	if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&res.json); err != nil {
			a.t.Fatalf("%s %s: body %q is not a JSON object: %v", r.method, r.path, res.raw, err)
		}
	}
	return res
}

// wantError checks an error response: status, JSON body with the code and
// a message.
func wantError(t *testing.T, res response, status int, code string) {
	t.Helper()
	if res.status != status {
		t.Fatalf("status: got %d, want %d (body %s)", res.status, status, res.raw)
	}
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type: got %q, want application/json", ct)
	}
	if res.json["error"] != code {
		t.Errorf("error: got %v, want %q (body %s)", res.json["error"], code, res.raw)
	}
	if msg, _ := res.json["message"].(string); msg == "" {
		t.Errorf("message: got none (body %s)", res.raw)
	}
	if len(res.json) != 2 {
		t.Errorf("body: got %s, want exactly error and message", res.raw)
	}
}

// api is the API client of this replica, with the admin token: for the
// set-up a test needs, where the request itself is not what is tested
// (do is for that).
func (a *testAPI) api() *apiclient.Client { return apitest.Client(a.srv.Handler(), adminToken) }

// createProduct makes a product through the API and returns its id.
func (a *testAPI) createProduct(name string, stock int) int64 {
	a.t.Helper()
	p, err := a.api().CreateProduct(context.Background(), name, int64(stock))
	if err != nil {
		a.t.Fatal(err)
	}
	return p.ID
}

// snapshot is everything in the database.
type snapshot struct {
	Products []seckill.Product
	Orders   []seckill.Order
}

func (a *testAPI) snapshot() snapshot {
	a.t.Helper()
	ctx := context.Background()
	products, err := a.db.Products(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	var s snapshot
	for _, p := range products {
		s.Products = append(s.Products, *p)
		list, err := a.db.Orders(ctx, p.ID, seckill.OrderQuery{Limit: seckill.MaxOrderLimit, Cursor: true})
		if err != nil {
			a.t.Fatal(err)
		}
		for _, o := range list.Orders {
			s.Orders = append(s.Orders, *o)
		}
	}
	return s
}

// unchanged runs fn and fails if the database differs afterwards.
func (a *testAPI) unchanged(fn func()) {
	a.t.Helper()
	before := a.snapshot()
	fn()
	if after := a.snapshot(); !reflect.DeepEqual(before, after) {
		a.t.Errorf("database changed:\nbefore %+v\nafter  %+v", before, after)
	}
}
