package loadtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// shortSale is a sale of well under a second: 120 requests at 1000 a
// second. The count ends it; the duration only bounds a machine too busy
// to send them all at that pace, so that the outcome never depends on how
// many it got out in time.
func shortSale(targets ...string) Config {
	return Config{
		Targets:      targets,
		AdminToken:   "secret",
		Stock:        20,
		Rate:         1000,
		Duration:     10 * time.Second,
		MaxRequests:  120,
		Timeout:      5 * time.Second,
		ProgressMode: ProgressLines,
	}
}

func TestRunCorrectShopOnTwoReplicasPasses(t *testing.T) {
	shop := newFakeShop(false)
	a, hitsA := shop.serve(t)
	b, hitsB := shop.serve(t)
	dir := t.TempDir()
	cfg := shortSale(a, b+"/") // a trailing slash must not matter
	cfg.RepeatShare = 0.1
	cfg.Out = filepath.Join(dir, "results.bin")
	cfg.Plot = filepath.Join(dir, "sale.html")

	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !rep.OK() || rep.Oversold {
		t.Fatalf("got verdict %q, want a pass\n%s", rep.Verdict(), out.String())
	}
	for _, inv := range rep.Invariants {
		if inv.Status != Pass {
			t.Errorf("invariant %d %s: got %s (%s), want PASS", inv.Number, inv.Name, inv.Status, inv.Detail)
		}
	}
	if rep.Created != 20 || rep.RunOrders != 20 || rep.After.Stock != 0 || rep.After.Sold != 20 {
		t.Errorf("got created %d, run orders %d, stock %d, sold %d; want 20, 20, 0, 20",
			rep.Created, rep.RunOrders, rep.After.Stock, rep.After.Sold)
	}
	if rep.Requests == 0 || rep.Requests > cfg.MaxRequests {
		t.Errorf("got %d requests, want 1..%d", rep.Requests, cfg.MaxRequests)
	}
	if got := rep.ByOutcome["201"] + rep.ByOutcome["409 sold_out"] + rep.ByOutcome["409 already_purchased"]; got != rep.Requests {
		t.Errorf("got %d answers that are 201 or 409, want all %d: %v", got, rep.Requests, rep.ByOutcome)
	}
	// A repeat may legitimately buy when the earlier request of its user was
	// still in flight (the earlier one is then refused), so only the total is
	// checked here; invariant 5 is what forbids a second purchase.
	repeats := 0
	for _, n := range rep.RepeatsByOutcome {
		repeats += n
	}
	if rep.Repeats == 0 || repeats != rep.Repeats {
		t.Errorf("got %d repeats, %d by outcome, want some and equal", rep.Repeats, repeats)
	}
	// Round-robin: request n goes to target n mod 2.
	if d := hitsA.Load() - hitsB.Load(); d < 0 || d > 1 || hitsA.Load()+hitsB.Load() != int64(rep.Requests) {
		t.Errorf("got %d and %d purchases on the two targets, want a round-robin split of %d", hitsA.Load(), hitsB.Load(), rep.Requests)
	}
	if rep.PurchaseLatency.Count != 20 || rep.Latency.Count != rep.Requests || rep.Latency.Max < rep.Latency.P50 {
		t.Errorf("got latencies %+v / %+v, want 20 purchases among %d requests", rep.PurchaseLatency, rep.Latency, rep.Requests)
	}
	for _, want := range []string{"PASS (3) stock + sold == S", "PASS: every safety invariant held", "sent "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// The results file is for `vegeta report`: it must decode as Vegeta gob.
	f, err := os.Open(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := vegeta.NewDecoder(f)
	decoded := 0
	for {
		var r vegeta.Result
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode result %d: %v", decoded, err)
		}
		decoded++
	}
	if decoded != rep.Requests {
		t.Errorf("got %d results in %s, want %d", decoded, cfg.Out, rep.Requests)
	}
	html, err := os.ReadFile(cfg.Plot)
	if err != nil || !bytes.Contains(html, []byte("seckill sale of product")) || !bytes.Contains(html, []byte("409 sold_out")) {
		t.Errorf("plot %s: err %v, %d bytes, want an HTML plot with outcome labels", cfg.Plot, err, len(html))
	}
}

func TestRunRacyShopIsCaughtOverselling(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	shop := newFakeShop(true)
	a, _ := shop.serve(t)
	cfg := shortSale(a)
	cfg.Stock = 3

	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !rep.Oversold || rep.OK() {
		t.Fatalf("got oversold %v, verdict %q; want the oversell caught\n%s", rep.Oversold, rep.Verdict(), out.String())
	}
	if inv := rep.Invariants[2]; inv.Number != 3 || inv.Status != Fail {
		t.Errorf("got invariant %d %s, want (3) to FAIL: %s", inv.Number, inv.Status, inv.Detail)
	}
	if rep.After.Sold <= 3 {
		t.Errorf("got %d sold of 3, want more", rep.After.Sold)
	}
	if !strings.Contains(out.String(), "FAIL: OVERSOLD") {
		t.Errorf("output lacks the failing verdict:\n%s", out.String())
	}

	cfg.ExpectOversell = true
	shop2 := newFakeShop(true)
	b, _ := shop2.serve(t)
	cfg.Targets = []string{b}
	rep, err = Run(t.Context(), cfg, io.Discard)
	if err != nil || !rep.OK() {
		t.Errorf("with ExpectOversell: got err %v, verdict %q, want a pass", err, rep.Verdict())
	}
}

func TestRunExistingProductAccountsForEarlierOrders(t *testing.T) {
	shop := newFakeShop(false)
	a, _ := shop.serve(t)
	first := shortSale(a)
	first.Stock = 30
	first.MaxRequests = 10
	rep1, err := Run(t.Context(), first, io.Discard)
	if err != nil || rep1.After.Sold != 10 {
		t.Fatalf("first run: got err %v, sold %d; want 10 sold", err, rep1.After.Sold)
	}

	second := shortSale(a)
	second.AdminToken = "" // not needed for an existing product
	second.ProductID = rep1.ProductID
	rep2, err := Run(t.Context(), second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !rep2.OK() || rep2.Before.Sold != 10 || rep2.RunOrders != 20 || rep2.After.Sold != 30 || rep2.UserPrefix == rep1.UserPrefix {
		t.Errorf("second run: got verdict %q, sold before %d, run orders %d, sold %d, prefixes %q %q; want pass, 10, 20, 30, distinct",
			rep2.Verdict(), rep2.Before.Sold, rep2.RunOrders, rep2.After.Sold, rep1.UserPrefix, rep2.UserPrefix)
	}
}

// TestRunCancelAbortsInFlightAndStillVerifies cancels a run meant to last a
// minute, with a request stuck on the server for as long as the client
// waits. Run can only return promptly if it stops Vegeta and aborts that
// request; it must still read the product back and judge it.
func TestRunCancelAbortsInFlightAndStillVerifies(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	shop := newFakeShop(false)
	release := make(chan struct{})
	shop.onPurchase = func(r *http.Request, n int64) {
		switch n {
		case 3:
			select { // stuck until the client gives up
			case <-r.Context().Done():
			case <-release:
			}
		case 10:
			cancel()
		}
	}
	a, _ := shop.serve(t)
	t.Cleanup(func() { close(release) }) // before the server's Close, if the abort failed
	cfg := shortSale(a)
	cfg.Rate = 200
	cfg.Duration = time.Minute
	cfg.Timeout = time.Minute
	cfg.MaxRequests = 0

	rep, err := Run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Stopped != "interrupted" || rep.Unknown == 0 || len(rep.Invariants) != 6 {
		t.Errorf("got stopped %q, unknown %d, %d invariants; want interrupted, >0, 6", rep.Stopped, rep.Unknown, len(rep.Invariants))
	}
	// Had the request not been aborted, it would have failed on the client
	// timeout a minute later, with another message.
	for msg := range rep.TransportErrors {
		if !strings.Contains(msg, "context canceled") {
			t.Errorf("got transport error %q, want only aborted requests", msg)
		}
	}
	if !rep.OK() || rep.Invariants[5].Status != Skip {
		t.Errorf("got verdict %q, liveness %s; want a pass with liveness skipped", rep.Verdict(), rep.Invariants[5].Status)
	}
}

// TestRunEndFinishesTheSaleInFull ends a sale meant to last a minute
// through Config.End while a purchase is in flight on the server. Unlike
// an interruption, the attack sends nothing more, that purchase gets its
// answer (it is held on the server for a moment, where an abort would
// reach it), and the sale is judged as one that ran its course: nothing
// unknown, liveness checked, not stopped early.
func TestRunEndFinishesTheSaleInFull(t *testing.T) {
	end := make(chan struct{})
	shop := newFakeShop(false)
	var aborted atomic.Bool
	var after atomic.Int64 // purchases the server received once end was closed
	shop.onPurchase = func(r *http.Request, n int64) {
		select {
		case <-end:
			after.Add(1)
			return
		default:
		}
		if n != 10 {
			return
		}
		close(end)
		hold := time.NewTimer(300 * time.Millisecond)
		defer hold.Stop()
		select {
		case <-hold.C:
		case <-r.Context().Done():
			aborted.Store(true)
		}
	}
	a, _ := shop.serve(t)
	cfg := shortSale(a)
	cfg.Stock = 5
	cfg.Rate = 200
	cfg.Duration = time.Minute
	cfg.MaxRequests = 0
	cfg.End = end

	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if aborted.Load() {
		t.Error("the purchase in flight when End was closed was aborted, want it answered")
	}
	if rep.Stopped != "" || rep.Unknown != 0 || len(rep.TransportErrors) != 0 {
		t.Errorf("got stopped %q, %d unknown outcomes, transport errors %v; want a sale that ran its course, every answer known",
			rep.Stopped, rep.Unknown, rep.TransportErrors)
	}
	// A minute at 200 a second would be 12,000; after End, only what the
	// workers had already taken on.
	if rep.Requests < 10 || rep.Requests > 10+int(after.Load()) || after.Load() > 50 {
		t.Errorf("got %d requests, %d of them after End; want the 10 before it and at most a few after", rep.Requests, after.Load())
	}
	if !rep.OK() || rep.After.Stock != 0 || rep.Invariants[5].Status != Pass {
		t.Errorf("got verdict %q, stock left %d, liveness %s (%s); want a pass, sold out, liveness checked",
			rep.Verdict(), rep.After.Stock, rep.Invariants[5].Status, rep.Invariants[5].Detail)
	}
	if s := out.String(); strings.Contains(s, "stopped early") || !strings.Contains(s, "for 1m0s at most, or until its caller ends it") {
		t.Errorf("report: want no \"stopped early\" and the shape with its end:\n%s", s)
	}
}

func TestRunSetUpErrors(t *testing.T) {
	shop := newFakeShop(false)
	a, _ := shop.serve(t)
	down := closedURL(t)

	cases := []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"unreachable", func(c *Config) { c.Targets = []string{a, down} }, "not reachable"},
		{"token rejected", func(c *Config) { c.AdminToken = "wrong" }, "401"},
		{"no token", func(c *Config) { c.AdminToken = "" }, "admin token"},
		{"unknown product", func(c *Config) { c.ProductID = 999 }, "404"},
		{"bad scheme", func(c *Config) { c.Targets = []string{"ftp://127.0.0.1"} }, "http://"},
		{"bad out path", func(c *Config) { c.Out = filepath.Join(t.TempDir(), "no", "such", "dir") }, "results file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := shortSale(a)
			tc.cfg(&cfg)
			_, err := Run(t.Context(), cfg, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
