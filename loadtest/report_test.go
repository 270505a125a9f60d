package loadtest

import (
	"strings"
	"testing"
	"time"
)

func TestReportVerdict(t *testing.T) {
	cases := []struct {
		oversold, expect, ok bool
		verdict              string
	}{
		{false, false, true, "PASS: every safety invariant held"},
		{true, false, false, "FAIL: OVERSOLD"},
		{true, true, true, "PASS: oversell detected"},
		{false, true, false, "FAIL: an oversell was expected"},
	}
	for _, tc := range cases {
		r := Report{Oversold: tc.oversold, ExpectOversell: tc.expect}
		if r.OK() != tc.ok || !strings.HasPrefix(r.Verdict(), tc.verdict) {
			t.Errorf("oversold %v, expect %v: got OK %v %q, want %v %q", tc.oversold, tc.expect, r.OK(), r.Verdict(), tc.ok, tc.verdict)
		}
	}
}

// A sale whose counts held but whose orders' life broke says which
// invariant failed rather than "oversold"; one whose counts broke too
// says oversold.
func TestReportVerdictOfTheOrdersLife(t *testing.T) {
	late := Invariant{Number: 9, Name: "no payment accepted after its window", Safety: true, Status: Fail}
	sum := Invariant{Number: 3, Name: "available + reserved + sold == S", Safety: true, Status: Fail}
	for _, tc := range []struct {
		invs    []Invariant
		expect  bool
		verdict string
	}{
		{[]Invariant{late}, false, "FAIL: A SAFETY INVARIANT OF THE ORDERS' LIFE FAILED: (9) no payment accepted after its window"},
		{[]Invariant{late}, true, "PASS: a safety invariant of the orders' life failed, as expected for this mode: (9) no payment accepted after its window"},
		{[]Invariant{sum, late}, false, "FAIL: OVERSOLD"},
	} {
		r := Report{Invariants: tc.invs, Oversold: Oversold(tc.invs), ExpectOversell: tc.expect}
		if r.OK() != tc.expect || !strings.HasPrefix(r.Verdict(), tc.verdict) {
			t.Errorf("%v, expect %v: got OK %v %q, want %v %q", tc.invs, tc.expect, r.OK(), r.Verdict(), tc.expect, tc.verdict)
		}
	}
}

func TestReportWriteText(t *testing.T) {
	o := sale(10, 10, 50)
	addOrder(&o, "lt-1-10")
	o.After.Stock = 0
	inv := Check(o)
	r := Report{
		Targets:          []string{"http://a", "http://b"},
		ProductID:        1,
		Before:           o.Before,
		After:            o.After,
		RunOrders:        11,
		Requests:         60,
		Repeats:          3,
		Created:          11,
		Unknown:          2,
		ByOutcome:        map[string]int{"201": 11, "409 sold_out": 44, "409 already_purchased": 3, "error": 2},
		RepeatsByOutcome: map[string]int{"409 already_purchased": 3},
		TransportErrors:  map[string]int{"dial tcp: connection refused": 2},
		Elapsed:          time.Second,
		RequestRate:      60,
		PurchaseRate:     110,
		LastPurchase:     100 * time.Millisecond,
		SoldOutAt:        123456 * time.Microsecond,
		Latency:          Latency{Count: 60, P50: time.Millisecond, P90: 2 * time.Millisecond, P99: 3 * time.Millisecond, Max: 4 * time.Millisecond},
		Invariants:       inv,
		Oversold:         Oversold(inv),
		Stopped:          "interrupted",
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Sale of product 1 (S = 10) on http://a, http://b, stopped early: interrupted",
		"orders 11 (by this run 11), stock left 0",
		"FAIL (3) stock + sold == S",
		"oversold by 1",
		"409 already_purchased",
		"(3 repeat)",
		`error "dial tcp: connection refused" x2`,
		"2 requests of unknown outcome",
		"sold out at 123.46ms (last 201 at 100ms)",
		"FAIL: OVERSOLD",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// A mix that asked for restocks says so when none ran, and how many ran
// when some did; the hint to pace by count goes only with a rate.
func TestReportSaysWhenNoRestockRan(t *testing.T) {
	for _, tt := range []struct {
		mix      Mix
		restocks int
		want     []string
		not      string
	}{
		{Mix{Restocks: 2}, 0, []string{"and 0 reads and 0 restocks mixed in", "no restock ran (restocks=2/s): the sale was over before the first was due; a share of the requests (restocks=2%) paces them by count"}, ""},
		{Mix{RestockShare: 0.5}, 0, []string{"no restock ran (restocks=50%): the sale was over before the first was due\n"}, "paces them by count"},
		{Mix{Reads: 0.1, RestockShare: 0.01}, 3, []string{"and 0 reads and 3 restocks mixed in"}, "no restock ran"},
		{Mix{}, 0, nil, "restocks mixed in"},
	} {
		var b strings.Builder
		if err := (Report{Mix: tt.mix, Restocks: tt.restocks}).WriteText(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range tt.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("mix %q with %d restocks: report lacks %q:\n%s", tt.mix, tt.restocks, want, b.String())
			}
		}
		if tt.not != "" && strings.Contains(b.String(), tt.not) {
			t.Errorf("mix %q with %d restocks: report says %q, want not:\n%s", tt.mix, tt.restocks, tt.not, b.String())
		}
	}
}
