package handlers_test

import (
	"regexp"
	"strings"
	"testing"
)

// The page is one self-contained document: no script, style or image is
// loaded from anywhere, so it works without a network.
func TestDashboardPage(t *testing.T) {
	a := newTestAPI(t)
	res := a.do(request{method: "GET", path: "/dashboard"})
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/html") {
		t.Fatalf("got %d %q", res.status, res.header.Get("Content-Type"))
	}
	for _, want := range []string{`id="stock"`, `id="sold"`, `id="chart-stock"`, `fetch(url`, `dashboard/data`} {
		if !strings.Contains(res.raw, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?https?:`)
	if m := external.FindString(res.raw); m != "" {
		t.Errorf("page loads something from the network: %q", m)
	}
}

func TestDashboardData(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 2)
	a.do(request{method: "POST", path: "/api/v1/products/1/purchase", body: `{"user_id":"u1"}`})
	res := a.do(request{method: "GET", path: "/dashboard/data"})
	if res.status != 200 {
		t.Fatalf("got %d %s", res.status, res.raw)
	}
	products, _ := res.json["products"].([]any)
	if len(products) != 1 {
		t.Fatalf("products: got %v, want the one product", res.json["products"])
	}
	p := products[0].(map[string]any)
	if p["stock"].(interface{ String() string }).String() != "1" || p["sold"].(interface{ String() string }).String() != "1" {
		t.Errorf("product: got %v, want stock 1, sold 1", p)
	}
	if res.json["scope"] != "shared" {
		t.Errorf("scope: got %v, want shared (redis lock mode)", res.json["scope"])
	}
	for _, q := range []string{"since=yesterday", "since=-1"} {
		wantError(t, a.do(request{method: "GET", path: "/dashboard/data?" + q}), 400, "invalid_request")
	}
}
