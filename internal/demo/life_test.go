package demo_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// reserving is a sale with a payment window of 1 s: 800 buyers over four
// windows, for 40 units, most buyers paying, some late, some cancelling,
// a fifth letting the window pass, so that units come back and are
// bought again.
var reserving = []string{"-window", "1s", "-buyers", "800", "-stock", "40"}

var ordersRE = regexp.MustCompile(`orders (\d+): paid (\d+), cancelled (\d+), expired (\d+), pending (\d+)`)

// The demo with payers, cancellers and lapses passes, over one product
// and over many, and on the designs without a lock that have a payment
// window: every invariant of the orders' life, every unit sold after the
// close-out, the history linearizable with the expiry rounds in it, and
// the expiry's lag printed.
func TestDemoSaleWithReservations(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a whole demo run (replicas, Redis, a load test)")
	}
	for _, tt := range []struct {
		name  string
		extra []string
	}{
		{"one product", nil},
		{"300 products", []string{"-products", "300", "-stock", "3"}},
		{"conditional", []string{"-design", "conditional"}},
		{"redis-counter", []string{"-design", "redis-counter"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"}, append(append([]string{}, reserving...), tt.extra...)...)
			if r.code != 0 {
				t.Errorf("exit status: got %d, want 0", r.code)
			}
			for _, want := range []string{"payment window 1s, each replica expires due orders every 100ms",
				"burst of 800 buyers over 4s", "buyers with a pending order pay 70% (10% of them late), cancel 10%, lapse 20%, then a close-out",
				"PASS (3) available + reserved + sold == S", "PASS (6) all sold when demand exceeded S", "PASS (7) each order leaves pending once",
				"PASS (8) no paid order expired", "PASS (9) no payment accepted after its window", "PASS (10) nothing pending past window + lag",
				"linearizable: yes (", "late pay 409 order_expired", "demo: expiry lag (window's end to closed_at) of ",
				"demo: PASS: every safety invariant held, nothing oversold, the history is linearizable"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			m := ordersRE.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatal("stdout lacks the orders by state")
			}
			n := make([]int, len(m))
			for i := 1; i < len(m); i++ {
				n[i], _ = strconv.Atoi(m[i])
			}
			// Units came back and were bought again: more orders than paid,
			// some cancelled and some expired, none left pending.
			if n[1] <= n[2] || n[3] == 0 || n[4] == 0 || n[5] != 0 {
				t.Errorf("orders %d: paid %d, cancelled %d, expired %d, pending %d; want cancelled and expired ones, none pending", n[1], n[2], n[3], n[4], n[5])
			}
			assertCleanedUp(t, r)
		})
	}
}

// Each control of a reservation's life is caught, with exit status 1 and
// the invariant it breaks: a payment after the window accepted (certain:
// a tenth of the payers pay late), an expiry that does not check the
// state it moves from (certain: the paid orders come due), and an expiry
// that puts units back outside the lock, as the value read plus them,
// with a pause of a fifth of the window between its read and its write:
// with more units than buyers, the stock is never out, and every
// purchase in a pause is lost.
func TestDemoCatchesTheLifeControls(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: whole demo runs (replicas, Redis, a load test)")
	}
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	for _, tt := range []struct {
		name  string
		extra []string
		want  []string
	}{
		{"payment after the window accepted", []string{"-unsafe-pay-late"},
			[]string{"FAIL (9) no payment accepted after its window", "a payment sent "}},
		{"expiry without the state check", []string{"-unsafe-expiry", "unchecked"},
			[]string{"FAIL (2) sold == paid, reserved == pending", "FAIL (8) no paid order expired", "and ended expired"}},
		{"expiry outside the lock", []string{"-unsafe-expiry", "unlocked", "-stock", "1000"},
			[]string{"pausing 200ms between its read and its write", "FAIL (3) available + reserved + sold == S", "oversold by "}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "server"}, append(append([]string{}, reserving...), tt.extra...)...)
			if r.code != 1 {
				t.Errorf("exit status: got %d, want 1", r.code)
			}
			for _, want := range append(tt.want, "linearizable: NO (", "demo: FAIL: ") {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			assertCleanedUp(t, r)
		})
	}
}
