package loadtest

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// manyProductsSale is shortSale over 50 products of 3 items each, the
// buyers skewed so that the first few sell out and the tail does not.
func manyProductsSale(targets ...string) Config {
	cfg := shortSale(targets...)
	cfg.Products, cfg.Stock = 50, 3
	cfg.Skew = Skew{Kind: SkewZipf, Param: 1.5}
	cfg.MaxRequests = 400
	cfg.Rate = 2000
	return cfg
}

func TestRunManyProductsOnACorrectShopPasses(t *testing.T) {
	shop := newFakeShop(false)
	a, _ := shop.serve(t)
	b, _ := shop.serve(t)
	cfg := manyProductsSale(a, b)
	cfg.RepeatShare = 0.05
	cfg.Mix = Mix{Reads: 0.1, RestockShare: 0.02}
	cfg.ReportJSON = filepath.Join(t.TempDir(), "report.json")
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !rep.OK() {
		t.Fatalf("got verdict %q, want a pass\n%s", rep.Verdict(), out.String())
	}
	if len(rep.Products) != 50 || rep.ProductID != 0 || rep.Skew != "zipf:1.5" {
		t.Fatalf("got %d products, product id %d, skew %q; want 50, 0, zipf:1.5", len(rep.Products), rep.ProductID, rep.Skew)
	}
	var created, orders, demand int
	var sold int64
	for i, p := range rep.Products {
		if p.Index != i || p.Oversold || p.Created != p.Orders {
			t.Errorf("product %d (index %d, want %d): oversold %v, 201s %d, orders %d", p.ID, p.Index, i, p.Oversold, p.Created, p.Orders)
		}
		for _, inv := range p.Invariants {
			if inv.Status == Fail {
				t.Errorf("product %d: invariant %d %s failed: %s", p.ID, inv.Number, inv.Name, inv.Detail)
			}
		}
		created, orders, demand, sold = created+p.Created, orders+p.Orders, demand+p.Demand, sold+p.After.Sold
	}
	if created != rep.Created || orders != rep.RunOrders || sold != rep.After.Sold {
		t.Errorf("the products add up to 201s %d, orders %d, sold %d; the report says %d, %d, %d",
			created, orders, sold, rep.Created, rep.RunOrders, rep.After.Sold)
	}
	// zipf:1.5 sends the first product about 39% of the buyers, the
	// second 14%: it is the hottest, and sells out.
	hot := rep.Products[0]
	for _, p := range rep.Products[1:] {
		if p.Demand > hot.Demand {
			t.Errorf("product %d had %d buyers, more than the hottest's %d", p.ID, p.Demand, hot.Demand)
		}
	}
	if hot.Demand < 3*int(hot.S()) || hot.Created < int(hot.S()) {
		t.Errorf("hottest product: %d buyers for %d items, %d sold; want it sold out under its demand", hot.Demand, hot.S(), hot.Created)
	}
	if rep.Linearizability.Verdict != LinYes || !strings.Contains(rep.Linearizability.Detail, "of 50 product(s)") {
		t.Errorf("linearizability: got %s, want yes over 50 products", rep.Linearizability.Line())
	}
	t.Log(out.String())
	for _, want := range []string{"Sale of 50 products (skew zipf:1.5)", "Hottest products (of 50)", "40 more", "every one of 50 products"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// One product of fifty oversells; every other is fine. The sale fails,
// and the failing invariant names that product.
func TestRunManyProductsCatchesTheOversellOfOne(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	shop := newFakeShop(true)
	shop.racyOnly = 1 // the first created: the hottest
	a, _ := shop.serve(t)
	cfg := manyProductsSale(a)
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !rep.Oversold || rep.OK() {
		t.Fatalf("got oversold %v, verdict %q; want the oversell caught\n%s", rep.Oversold, rep.Verdict(), out.String())
	}
	for _, p := range rep.Products {
		if p.Oversold != (p.ID == 1) {
			t.Errorf("product %d: oversold %v; want only product 1", p.ID, p.Oversold)
		}
	}
	if inv := rep.Invariants[2]; inv.Status != Fail || !strings.HasPrefix(inv.Detail, "product 1: ") || !strings.Contains(inv.Detail, "1 of 50 products fail") {
		t.Errorf("invariant 3: got %s %q, want FAIL naming product 1", inv.Status, inv.Detail)
	}
	if !strings.Contains(out.String(), "OVERSOLD") {
		t.Errorf("output lacks OVERSOLD in the products' lines:\n%s", out.String())
	}
}

// Stock that moves from one product to the next oversells one and loses
// the other's, while the sale's totals add up: only checking each product
// on its own catches it.
func TestRunManyProductsChecksEachProductNotTheTotal(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	shop := newFakeShop(false)
	shop.movesStock = true
	a, _ := shop.serve(t)
	cfg := manyProductsSale(a)
	cfg.Stock = 100 // nothing sells out: the totals stay exact
	rep, err := Run(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if total := rep.After.Stock + rep.After.Sold; total != rep.Before.Stock+rep.Before.Sold {
		t.Fatalf("the totals do not add up (%d, want %d): the shop was to move stock, not lose it", total, rep.Before.Stock+rep.Before.Sold)
	}
	if !rep.Oversold || rep.Invariants[2].Status != Fail {
		t.Errorf("got oversold %v, invariant 3 %s (%s); want the moved stock caught", rep.Oversold, rep.Invariants[2].Status, rep.Invariants[2].Detail)
	}
	if total := Check(Observed{Before: rep.Before, After: rep.After})[2]; total.Status != Pass {
		t.Errorf("the totals alone: got %s, want PASS (what a check of the totals would have said)", total.Status)
	}
}

func TestManyProductsConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  func(*Config)
		want string
	}{
		{func(c *Config) { c.Products = -1 }, "products -1"},
		{func(c *Config) { c.Products = MaxProducts + 1 }, fmt.Sprintf("products %d", MaxProducts+1)},
		{func(c *Config) { c.ProductID, c.Products = 7, 2 }, "sells alone"},
		{func(c *Config) { c.Skew = Skew{Kind: SkewZipf, Param: 1} }, "exponent above 1"},
	} {
		cfg := shortSale("http://127.0.0.1:1")
		tt.cfg(&cfg)
		if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want an error mentioning %q", err, tt.want)
		}
	}
	cfg := shortSale("http://127.0.0.1:1")
	cfg.Products = 2000
	cfg, err := cfg.withDefaults()
	if err != nil || cfg.Shape() != "steady 1000 req/s for 10s over 2000 products, skew zipf:1.1" {
		t.Errorf("got %q, %v; want the default skew in the shape", cfg.Shape(), err)
	}
}
