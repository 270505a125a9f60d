package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// GET /metrics is the Prometheus text format, parsed here with
// Prometheus's own parser: the service's counters and histograms, the Go
// runtime's, and the HTTP requests by route pattern, not by path.
func TestMetrics(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 1)
	a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"u1"}`})
	a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"u2"}`})
	a.do(request{method: "GET", path: "/api/v1/products/1"})
	a.do(request{method: "GET", path: "/no/such/page"})
	res := a.do(request{method: "GET", path: "/metrics"})
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("got %d %q", res.status, res.header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(res.raw))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, res.raw)
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			match := len(got)*2 == len(labels)
			for i := 0; match && i < len(labels); i += 2 {
				match = got[labels[i]] == labels[i+1]
			}
			if !match {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("%s has no sample %v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"seckill_purchases_total", []string{"outcome", "created"}, 1},
		{"seckill_purchases_total", []string{"outcome", "sold_out"}, 1},
		{"seckill_purchases_total", []string{"outcome", "fence_rejected"}, 0},
		{"seckill_fence_rejections_total", []string{"stage", "write"}, 0},
		{"seckill_lock_acquisitions_total", []string{"contended", "false"}, 1},
		{"seckill_lock_wait_seconds", nil, 1},
		{"seckill_lock_held_seconds", nil, 1},
		{"seckill_purchase_batch_size", nil, 1},
		{"seckill_lock_leases_lost_total", nil, 0},
		{"seckill_http_requests_total", []string{"method", "POST", "route", "/api/v1/products/:id/purchase", "status", "201"}, 1},
		{"seckill_http_requests_total", []string{"method", "POST", "route", "/api/v1/products/:id/purchase", "status", "409"}, 1},
		{"seckill_http_requests_total", []string{"method", "GET", "route", "/api/v1/products/:id", "status", "200"}, 1},
		{"seckill_http_requests_total", []string{"method", "GET", "route", "unmatched", "status", "404"}, 1},
		{"seckill_http_request_duration_seconds", []string{"method", "POST", "route", "/api/v1/products/:id/purchase"}, 2},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v: got %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	if fams["seckill_lock_wait_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("seckill_lock_wait_seconds: got type %v, want a histogram", fams["seckill_lock_wait_seconds"].GetType())
	}
	if g := value("go_goroutines"); g < 1 {
		t.Errorf("go_goroutines: got %g", g)
	}
}
