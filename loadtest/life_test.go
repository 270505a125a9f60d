package loadtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lifeSale is a sale of 10 units to 300 buyers over 1.5 s, against a shop
// whose window is 300 ms: several windows, so units that come back are
// bought again. Its buyers pay (a quarter of them late), cancel, or let
// the window pass, and a close-out buys what came back at the end.
func lifeSale(dir string, targets ...string) Config {
	cfg := shortSale(targets...)
	cfg.Stock = 10
	cfg.Rate, cfg.Duration, cfg.MaxRequests = 0, 0, 0
	cfg.Buyers, cfg.BurstWindow = 300, 1500*time.Millisecond
	cfg.RepeatShare = 0.05
	cfg.Life = Life{Pay: 0.6, Cancel: 0.2, Late: 0.25, Lag: 2 * time.Second, CloseOut: true}
	cfg.History = filepath.Join(dir, "history.jsonl")
	cfg.Report = filepath.Join(dir, "report.html")
	return cfg
}

func windowShop(life fakeLife) *fakeShop {
	s := newFakeShop(false)
	s.life = life
	return s
}

// A correct shop with a window: the sale passes every invariant, every
// unit ends sold after the close-out, its history with the payments,
// cancels and expiries is linearizable, and the units came back and were
// bought again.
func TestRunSaleWithReservations(t *testing.T) {
	shop := windowShop(fakeLife{window: 300 * time.Millisecond, expireEvery: 20 * time.Millisecond})
	a, _ := shop.serve(t)
	b, _ := shop.serve(t)
	dir := t.TempDir()
	cfg := lifeSale(dir, a, b)
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !rep.OK() || rep.Linearizability.Verdict != LinYes {
		t.Fatalf("got %q, %s; want a pass, linearizable\n%s", rep.Verdict(), rep.Linearizability.Line(), out.String())
	}
	if len(rep.Invariants) != 10 {
		t.Fatalf("got %d invariants, want the 10 of a sale with a window\n%s", len(rep.Invariants), out.String())
	}
	for _, inv := range rep.Invariants {
		if inv.Status != Pass {
			t.Errorf("(%d) %s: got %s (%s), want PASS", inv.Number, inv.Name, inv.Status, inv.Detail)
		}
	}
	r := rep.Reservations
	if r == nil {
		t.Fatalf("no reservations in the report\n%s", out.String())
	}
	if r.Orders[StatePaid] != 10 || r.Orders[StateCancelled] == 0 || r.Orders[StateExpired] == 0 || r.Orders[StatePending] != 0 {
		t.Errorf("orders by state %v: want 10 paid, some cancelled and expired, none pending", r.Orders)
	}
	// The units that came back were reserved again: more orders than
	// units (about twice as many, here).
	if r.Total() <= int(cfg.Stock) {
		t.Errorf("got %d orders for %d units: want the units that came back bought again", r.Total(), cfg.Stock)
	}
	t.Logf("%d orders for %d units: %v", r.Total(), cfg.Stock, r.Orders)
	if r.Moves["late pay 409 order_expired"] == 0 || r.Moves["pay 200"] == 0 || r.Moves["cancel 200"] == 0 || r.Moves["lapse"] == 0 {
		t.Errorf("buyers' moves %v: want payments, cancels, lapses, and late payments refused", r.Moves)
	}
	if r.ExpiryLag.Count != r.Orders[StateExpired] || r.ExpiryLag.Max <= 0 || r.ExpiryLag.Max > cfg.Life.Lag {
		t.Errorf("expiry lag %+v: want one per expired order (%d), within the lag's bound", r.ExpiryLag, r.Orders[StateExpired])
	}
	last := r.Steps[len(r.Steps)-1]
	if last.Paid != 10 || last.Reserved != 0 || last.Cancelled != r.Orders[StateCancelled] || last.Expired != r.Orders[StateExpired] {
		t.Errorf("the timeline ends at %+v, want the orders' states %v", last, r.Orders)
	}
	for _, want := range []string{"Reservations (window 300ms; buyers pay 60% (25% of them late), cancel 20%, lapse 20%, then a close-out)",
		"expiry lag (window's end to closed_at) of ", "after the sale: nothing reserved", "PASS (6) all sold when demand exceeded S",
		"PASS (3) available + reserved + sold == S", "PASS (9) no payment accepted after its window", "reserved      paid cancelled   expired"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	f, err := os.Open(cfg.History)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[OpKind]int{}
	for _, op := range ops {
		kinds[op.Kind]++
	}
	if kinds[OpPay] == 0 || kinds[OpCancel] == 0 || kinds[OpExpire] == 0 {
		t.Errorf("history by kind %v: want payments, cancels and expiries", kinds)
	}
	html, err := os.ReadFile(cfg.Report)
	if err != nil || !bytes.Contains(html, []byte(`class="life-chart"`)) || !bytes.Contains(html, []byte(`polyline class="expired"`)) {
		t.Errorf("HTML report %s: err %v; want the reservations' chart", cfg.Report, err)
	}
	for _, want := range []string{`<td class="num" id="paid">10</td>`, fmt.Sprintf(`<td class="num" id="expired">%d</td>`, r.Orders[StateExpired]),
		`<polyline class="reserved"`, "expiry lag (window&#39;s end to closed_at)"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
}

// The orders over time: reserved from created_at until closed_at, each
// closed order counted by its state from its closed_at on (an expired one
// without closed_at from its window's end).
func TestLifeTimeline(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(n int) time.Time { return start.Add(ms(n)) }
	orders := []Order{
		{State: StatePaid, CreatedAt: at(1), ExpiresAt: at(101), ClosedAt: at(30)},
		{State: StateCancelled, CreatedAt: at(2), ExpiresAt: at(102), ClosedAt: at(50)},
		{State: StateExpired, CreatedAt: at(3), ExpiresAt: at(103), ClosedAt: at(120)},
		{State: StateExpired, CreatedAt: at(60), ExpiresAt: at(160)}, // no closed_at
		{State: StatePending, CreatedAt: at(130), ExpiresAt: at(230)},
	}
	step, steps := lifeTimeline(orders, start, ms(199))
	if step != 2*time.Millisecond || len(steps) != 100 {
		t.Fatalf("got %d steps of %v, want 100 of 2ms", len(steps), step)
	}
	for _, c := range []struct {
		at   int // ms: the end of a step
		want LifeStep
	}{
		{2, LifeStep{Reserved: 1}},
		{40, LifeStep{Reserved: 2, Paid: 1}},
		{70, LifeStep{Reserved: 2, Paid: 1, Cancelled: 1}},
		{130, LifeStep{Reserved: 1, Paid: 1, Cancelled: 1, Expired: 1}},
		{140, LifeStep{Reserved: 2, Paid: 1, Cancelled: 1, Expired: 1}},
		{200, LifeStep{Reserved: 1, Paid: 1, Cancelled: 1, Expired: 2}},
	} {
		got := steps[c.at/2-1]
		c.want.At = ms(c.at)
		if got != c.want {
			t.Errorf("by %dms: got %+v, want %+v", c.at, got, c.want)
		}
	}
}

// The shop's controls are caught: a payment accepted after its window
// (the counts add up while the order was still pending; the clocks do
// not), and an expiry that does not check the state it moves from.
func TestRunSaleWithReservationsCatchesTheControls(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	for _, tc := range []struct {
		name string
		life fakeLife
		want []int // invariants that must fail
	}{
		{"payment after the window accepted", fakeLife{payLate: true}, []int{9}},
		{"expiry without the state check", fakeLife{unchecked: true}, []int{2, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.life.window, tc.life.expireEvery = 300*time.Millisecond, 20*time.Millisecond
			a, _ := windowShop(tc.life).serve(t)
			cfg := lifeSale(t.TempDir(), a)
			cfg.Life.CloseOut = false
			var out bytes.Buffer
			rep, err := Run(t.Context(), cfg, &out)
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, out.String())
			}
			if rep.OK() || !rep.Oversold || rep.Linearizability.Verdict != LinNo {
				t.Errorf("got %q, %s; want the control caught by the invariants and the history", rep.Verdict(), rep.Linearizability.Line())
			}
			for _, n := range tc.want {
				if inv := rep.Invariants[n-1]; inv.Status != Fail {
					t.Errorf("(%d) %s: got %s (%s), want FAIL", n, inv.Name, inv.Status, inv.Detail)
				}
			}
			t.Log(rep.Linearizability.Line())
		})
	}
}
