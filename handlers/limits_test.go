package handlers_test

import (
	"net/http"
	"strings"
	"testing"
)

func TestRoutingErrors(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 5)
	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nothing", 404, "not_found"},
		{"GET", "/api/v1/products/", 404, "not_found"},
		{"GET", "/api/v2/products", 404, "not_found"},
		{"DELETE", "/api/v1/products/1", 405, "method_not_allowed"},
		{"GET", "/api/v1/products/1/purchase", 405, "method_not_allowed"},
		{"POST", "/healthz", 405, "method_not_allowed"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			a.unchanged(func() {
				res := a.do(request{method: tt.method, path: tt.path})
				wantError(t, res, tt.status, tt.code)
				if tt.status == 405 && res.header.Get("Allow") == "" {
					t.Error("405 without Allow")
				}
			})
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 5)
	big := `{"user_id":"` + strings.Repeat("u", 70<<10) + `"}`
	for _, tt := range []struct {
		name, method, path, token string
		chunked                   bool
	}{
		{"purchase", "POST", "/api/v1/products/1/purchase", "", false},
		{"purchase chunked", "POST", "/api/v1/products/1/purchase", "", true},
		{"create", "POST", "/api/v1/products", adminToken, false},
		{"create chunked", "POST", "/api/v1/products", adminToken, true},
		{"restock chunked", "PUT", "/api/v1/products/1/stock", adminToken, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a.unchanged(func() {
				res := a.do(request{method: tt.method, path: tt.path, body: big, token: tt.token, chunked: tt.chunked})
				wantError(t, res, http.StatusRequestEntityTooLarge, "request_too_large")
			})
		})
	}
}

func TestMetrics(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 1)
	a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"u1"}`})
	a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"u2"}`})
	res := a.do(request{method: "GET", path: "/metrics"})
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("got %d %q", res.status, res.header.Get("Content-Type"))
	}
	for _, line := range []string{
		`seckill_purchases_total{outcome="created"} 1`,
		`seckill_purchases_total{outcome="sold_out"} 1`,
		`seckill_purchases_total{outcome="fence_rejected"} 0`,
		`seckill_fence_rejections_total{stage="write"} 0`,
		`seckill_lock_acquisitions_total{contended="false"} 1`,
		`seckill_lock_wait_seconds_count 1`,
		`seckill_lock_leases_lost_total 0`,
	} {
		if !strings.Contains(res.raw, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, res.raw)
		}
	}
}
