package handlers_test

import (
	"fmt"
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
	for _, want := range []string{`id="inv-products"`, `id="top-rows"`, `id="others"`, `id="stock"`, `id="sold"`, `id="chart-stock"`, `fetch(url`, `dashboard/data`} {
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
	str := func(v any) string {
		s, _ := v.(interface{ String() string })
		if s == nil {
			return fmt.Sprint(v)
		}
		return s.String()
	}
	// The product has an order, but the dashboard's seconds reach it only
	// once written, a second or so later: the totals are the database's
	// now.
	inv, _ := res.json["inventory"].(map[string]any)
	if str(inv["products"]) != "1" || str(inv["stock"]) != "1" || str(inv["sold"]) != "1" || str(inv["sold_out"]) != "0" {
		t.Errorf("inventory: got %v, want 1 product, stock 1, sold 1, none sold out", res.json["inventory"])
	}
	if _, ok := res.json["top"].([]any); !ok {
		t.Errorf("top: got %v, want a list", res.json["top"])
	}
	if res.json["scope"] != "shared" {
		t.Errorf("scope: got %v, want shared (redis lock mode)", res.json["scope"])
	}
	for _, q := range []string{"since=yesterday", "since=-1"} {
		wantError(t, a.do(request{method: "GET", path: "/dashboard/data?" + q}), 400, "invalid_request")
	}
}
