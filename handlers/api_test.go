package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
)

func TestHealthAndReady(t *testing.T) {
	a := newTestAPI(t)
	res := a.do(request{method: "GET", path: "/healthz"})
	if res.status != 200 || res.json["status"] != "ok" {
		t.Errorf("healthz: got %d %s, want 200 {\"status\":\"ok\"}", res.status, res.raw)
	}
	res = a.do(request{method: "GET", path: "/readyz"})
	if res.status != 200 || res.json["status"] != "ready" {
		t.Errorf("readyz: got %d %s, want 200 {\"status\":\"ready\"}", res.status, res.raw)
	}
	if err := a.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	wantError(t, a.do(request{method: "GET", path: "/readyz"}), http.StatusServiceUnavailable, "not_ready")
	// Liveness does not depend on Redis.
	if res := a.do(request{method: "GET", path: "/healthz"}); res.status != 200 {
		t.Errorf("healthz without Redis: got %d, want 200", res.status)
	}
}

func TestCreateProduct(t *testing.T) {
	a := newTestAPI(t)
	res := a.do(request{method: "POST", path: "/api/v1/products", body: `{"name":"phone","stock":3}`, token: adminToken})
	if res.status != http.StatusCreated {
		t.Fatalf("got %d %s, want 201", res.status, res.raw)
	}
	if res.raw != `{"id":1,"name":"phone","stock":3,"available":3,"reserved":0,"sold":0}` {
		t.Errorf("body: got %s", res.raw)
	}

	long := strings.Repeat("n", 201)
	for _, tt := range []struct {
		name, body, token string
		status            int
		code, field       string
	}{
		{"no token", `{"name":"x","stock":1}`, "", 401, "unauthorized", ""},
		{"wrong token", `{"name":"x","stock":1}`, "nope", 401, "unauthorized", ""},
		{"token prefix", `{"name":"x","stock":1}`, adminToken[:5], 401, "unauthorized", ""},
		{"no token, bad body", `{`, "", 401, "unauthorized", ""},
		{"malformed", `{"name":"x",`, adminToken, 400, "invalid_request", "body"},
		{"not JSON", `name=x`, adminToken, 400, "invalid_request", "body"},
		{"empty body", ``, adminToken, 400, "invalid_request", "body"},
		{"array", `[]`, adminToken, 400, "invalid_request", "body"},
		{"two objects", `{"name":"x","stock":1}{}`, adminToken, 400, "invalid_request", "body"},
		{"unknown field", `{"name":"x","stock":1,"price":5}`, adminToken, 400, "invalid_request", "price"},
		{"name missing", `{"stock":1}`, adminToken, 400, "invalid_request", "name"},
		{"name null", `{"name":null,"stock":1}`, adminToken, 400, "invalid_request", "name"},
		{"stock missing", `{"name":"x"}`, adminToken, 400, "invalid_request", "stock"},
		{"name empty", `{"name":"","stock":1}`, adminToken, 400, "invalid_request", "name"},
		{"name too long", `{"name":"` + long + `","stock":1}`, adminToken, 400, "invalid_request", "name"},
		{"name number", `{"name":5,"stock":1}`, adminToken, 400, "invalid_request", "name"},
		{"stock negative", `{"name":"x","stock":-1}`, adminToken, 400, "invalid_request", "stock"},
		{"stock too big", `{"name":"x","stock":10000001}`, adminToken, 400, "invalid_request", "stock"},
		{"stock fraction", `{"name":"x","stock":1.5}`, adminToken, 400, "invalid_request", "stock"},
		{"stock overflow", `{"name":"x","stock":1e30}`, adminToken, 400, "invalid_request", "stock"},
		{"stock string", `{"name":"x","stock":"5"}`, adminToken, 400, "invalid_request", "stock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a.unchanged(func() {
				res := a.do(request{method: "POST", path: "/api/v1/products", body: tt.body, token: tt.token})
				wantError(t, res, tt.status, tt.code)
				if tt.status == 401 && res.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
				if msg, _ := res.json["message"].(string); tt.field != "" && !strings.HasPrefix(msg, tt.field+":") {
					t.Errorf("message %q does not name the field %q", msg, tt.field)
				}
			})
		})
	}
	t.Run("other auth scheme", func(t *testing.T) {
		a.unchanged(func() {
			res := a.do(request{method: "POST", path: "/api/v1/products", body: `{"name":"x","stock":1}`,
				header: map[string]string{"Authorization": "Basic " + adminToken}})
			wantError(t, res, 401, "unauthorized")
		})
	})
}

func TestListAndGetProduct(t *testing.T) {
	a := newTestAPI(t)
	res := a.do(request{method: "GET", path: "/api/v1/products"})
	if res.status != 200 || res.raw != `{"products":[]}` {
		t.Errorf("empty list: got %d %s, want 200 {\"products\":[]}", res.status, res.raw)
	}
	id := a.createProduct("phone", 2)
	a.createProduct("case", 0)
	a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"u1"}`})
	res = a.do(request{method: "GET", path: "/api/v1/products"})
	want := `{"products":[{"id":1,"name":"phone","stock":1,"available":1,"reserved":0,"sold":1},{"id":2,"name":"case","stock":0,"available":0,"reserved":0,"sold":0}]}`
	if res.status != 200 || res.raw != want {
		t.Errorf("list: got %d %s, want 200 %s", res.status, res.raw, want)
	}
	res = a.do(request{method: "GET", path: "/api/v1/products/" + strconv.FormatInt(id, 10)})
	if res.status != 200 || res.raw != `{"id":1,"name":"phone","stock":1,"available":1,"reserved":0,"sold":1}` {
		t.Errorf("get: got %d %s", res.status, res.raw)
	}
	for _, tt := range []struct {
		path   string
		status int
		code   string
	}{
		{"/api/v1/products/abc", 400, "invalid_request"},
		{"/api/v1/products/0", 400, "invalid_request"},
		{"/api/v1/products/-1", 400, "invalid_request"},
		{"/api/v1/products/+1", 400, "invalid_request"},
		{"/api/v1/products/1.0", 400, "invalid_request"},
		{"/api/v1/products/99999999999999999999", 400, "invalid_request"},
		{"/api/v1/products/3", 404, "not_found"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			a.unchanged(func() { wantError(t, a.do(request{method: "GET", path: tt.path}), tt.status, tt.code) })
		})
	}
}

func TestRestock(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 1)
	res := a.do(request{method: "PUT", path: "/api/v1/products/1/stock", body: `{"stock":7}`, token: adminToken})
	if res.status != 200 || res.raw != `{"id":1,"name":"phone","stock":7,"available":7,"reserved":0,"sold":0}` {
		t.Fatalf("restock: got %d %s", res.status, res.raw)
	}
	for _, tt := range []struct {
		name, path, body, token string
		status                  int
		code                    string
	}{
		{"no token", "/api/v1/products/1/stock", `{"stock":1}`, "", 401, "unauthorized"},
		{"wrong token", "/api/v1/products/1/stock", `{"stock":1}`, "x", 401, "unauthorized"},
		{"bad id", "/api/v1/products/x/stock", `{"stock":1}`, adminToken, 400, "invalid_request"},
		{"missing product", "/api/v1/products/9/stock", `{"stock":1}`, adminToken, 404, "not_found"},
		{"stock missing", "/api/v1/products/1/stock", `{}`, adminToken, 400, "invalid_request"},
		{"stock negative", "/api/v1/products/1/stock", `{"stock":-5}`, adminToken, 400, "invalid_request"},
		{"stock too big", "/api/v1/products/1/stock", `{"stock":20000000}`, adminToken, 400, "invalid_request"},
		{"stock bool", "/api/v1/products/1/stock", `{"stock":true}`, adminToken, 400, "invalid_request"},
		{"unknown field", "/api/v1/products/1/stock", `{"stock":1,"name":"y"}`, adminToken, 400, "invalid_request"},
		{"malformed", "/api/v1/products/1/stock", `{"stock":`, adminToken, 400, "invalid_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a.unchanged(func() {
				wantError(t, a.do(request{method: "PUT", path: tt.path, body: tt.body, token: tt.token}), tt.status, tt.code)
			})
		})
	}
}

func TestPurchase(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 1)
	a.createProduct("empty", 0)
	a.createProduct("held", 5)
	start := time.Now().UTC().Truncate(time.Millisecond)
	res := a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"alice"}`})
	if res.status != http.StatusCreated {
		t.Fatalf("purchase: got %d %s, want 201", res.status, res.raw)
	}
	order, _ := res.json["order"].(map[string]any)
	if len(res.json) != 1 || order == nil {
		t.Fatalf("body: got %s, want {\"order\": {...}}", res.raw)
	}
	fence, _ := order["fence"].(json.Number).Int64()
	created, err := time.Parse(time.RFC3339, order["created_at"].(string))
	if order["id"] != json.Number("1") || order["product_id"] != json.Number("1") || order["user_id"] != "alice" ||
		fence <= 0 || err != nil || created.Before(start) || order["state"] != "paid" || len(order) != 6 {
		t.Errorf("order: got %s, want id 1, product 1, alice, a positive fence, an RFC 3339 time, paid (no payment window)", res.raw)
	}

	// The held product's lock is taken by another process for the rest of
	// the test.
	other, err := lock.New(a.redis.Client(), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.Acquire(context.Background(), seckill.LockName(3))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	for _, tt := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"sold out", "/api/v1/products/1/purchase", `{"user_id":"bob"}`, 409, "sold_out"},
		{"sold out from the start", "/api/v1/products/2/purchase", `{"user_id":"bob"}`, 409, "sold_out"},
		{"busy", "/api/v1/products/3/purchase", `{"user_id":"bob"}`, 503, "busy"},
		{"missing product", "/api/v1/products/9/purchase", `{"user_id":"bob"}`, 404, "not_found"},
		{"bad id", "/api/v1/products/x/purchase", `{"user_id":"bob"}`, 400, "invalid_request"},
		{"user missing", "/api/v1/products/3/purchase", `{}`, 400, "invalid_request"},
		{"user empty", "/api/v1/products/3/purchase", `{"user_id":""}`, 400, "invalid_request"},
		{"user space", "/api/v1/products/3/purchase", `{"user_id":"a b"}`, 400, "invalid_request"},
		{"user too long", "/api/v1/products/3/purchase", `{"user_id":"` + strings.Repeat("u", 65) + `"}`, 400, "invalid_request"},
		{"user number", "/api/v1/products/3/purchase", `{"user_id":7}`, 400, "invalid_request"},
		{"unknown field", "/api/v1/products/3/purchase", `{"user_id":"bob","qty":2}`, 400, "invalid_request"},
		{"malformed", "/api/v1/products/3/purchase", `{"user_id"`, 400, "invalid_request"},
		{"empty body", "/api/v1/products/3/purchase", ``, 400, "invalid_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a.unchanged(func() {
				res := a.do(request{method: "POST", path: tt.path, body: tt.body})
				wantError(t, res, tt.status, tt.code)
				if tt.status == 503 && res.header.Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
			})
		})
	}
	held.Release(context.Background())
	t.Run("already purchased", func(t *testing.T) {
		a.do(request{method: "POST", path: "/api/v1/products/3/purchase", body: `{"user_id":"carol"}`})
		a.unchanged(func() {
			res := a.do(request{method: "POST", path: "/api/v1/products/3/purchase", body: `{"user_id":"carol"}`})
			wantError(t, res, 409, "already_purchased")
		})
	})
}

// orderID is the id of a listed order, as JSON text.
func orderID(t *testing.T, o any) string {
	t.Helper()
	id, ok := o.(map[string]any)["id"].(json.Number)
	if !ok {
		t.Fatalf("order %v has no numeric id", o)
	}
	return string(id)
}

func TestListOrders(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 5)
	for _, u := range []string{"u1", "u2", "u3"} {
		if res := a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"` + u + `"}`}); res.status != 201 {
			t.Fatalf("purchase: %d %s", res.status, res.raw)
		}
	}
	res := a.do(request{method: "GET", path: "/api/v1/products/1/orders?limit=2&offset=1"})
	if res.status != 200 || res.json["product_id"] != json.Number("1") || res.json["count"] != json.Number("3") {
		t.Fatalf("got %d %s, want 200, product 1, count 3", res.status, res.raw)
	}
	orders, _ := res.json["orders"].([]any)
	if len(orders) != 2 || orders[0].(map[string]any)["user_id"] != "u2" || orders[1].(map[string]any)["user_id"] != "u3" {
		t.Errorf("orders: got %v, want u2 and u3", orders)
	}
	if res.json["next"] != nil {
		t.Errorf("next: got %v, want null: u3 is the last order", res.json["next"])
	}
	res = a.do(request{method: "GET", path: "/api/v1/products/1/orders"})
	if orders, _ := res.json["orders"].([]any); res.status != 200 || len(orders) != 3 || res.json["next"] != nil {
		t.Errorf("default page: got %d %s, want all 3 and next null", res.status, res.raw)
	}
	// By cursor: no count, and next leads to the rest.
	res = a.do(request{method: "GET", path: "/api/v1/products/1/orders?after=0&limit=2"})
	first, _ := res.json["orders"].([]any)
	if _, counted := res.json["count"]; res.status != 200 || counted || len(first) != 2 || res.json["next"] != json.Number(orderID(t, first[1])) {
		t.Fatalf("first cursor page: got %d %s, want 2 orders, no count, next = the second's id", res.status, res.raw)
	}
	res = a.do(request{method: "GET", path: "/api/v1/products/1/orders?limit=2&after=" + orderID(t, first[1])})
	rest, _ := res.json["orders"].([]any)
	if res.status != 200 || len(rest) != 1 || rest[0].(map[string]any)["user_id"] != "u3" || res.json["next"] != nil {
		t.Errorf("second cursor page: got %d %s, want u3 and next null", res.status, res.raw)
	}
	for _, tt := range []struct {
		path   string
		status int
		code   string
	}{
		{"/api/v1/products/x/orders", 400, "invalid_request"},
		{"/api/v1/products/7/orders", 404, "not_found"},
		{"/api/v1/products/1/orders?limit=0", 400, "invalid_request"},
		{"/api/v1/products/1/orders?limit=1001", 400, "invalid_request"},
		{"/api/v1/products/1/orders?limit=abc", 400, "invalid_request"},
		{"/api/v1/products/1/orders?limit=", 400, "invalid_request"},
		{"/api/v1/products/1/orders?offset=-1", 400, "invalid_request"},
		{"/api/v1/products/1/orders?offset=1.5", 400, "invalid_request"},
		{"/api/v1/products/1/orders?after=-1", 400, "invalid_request"},
		{"/api/v1/products/1/orders?after=", 400, "invalid_request"},
		{"/api/v1/products/1/orders?after=99999999999999999999", 400, "invalid_request"},
		{"/api/v1/products/1/orders?after=1&offset=1", 400, "invalid_request"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			a.unchanged(func() { wantError(t, a.do(request{method: "GET", path: tt.path}), tt.status, tt.code) })
		})
	}
}
