package loadtest

import (
	"fmt"
	"strings"
	"testing"
)

// sale builds a made-up observation of a correct sale: stock s, n users of
// this run each bought once, demand users tried.
func sale(s int64, n, demand int) Observed {
	o := Observed{
		Before:        Product{ID: 1, Stock: s},
		After:         Product{ID: 1, Stock: s - int64(n), Sold: int64(n)},
		UserPrefix:    "lt-1-",
		Created:       n,
		CreatedByUser: map[string]int{},
		Demand:        demand,
		EndedNormally: true,
	}
	for i := range n {
		u := fmt.Sprintf("lt-1-%d", i)
		o.Orders = append(o.Orders, Order{ID: int64(i + 1), ProductID: 1, UserID: u})
		o.CreatedByUser[u] = 1
	}
	return o
}

// addOrder adds an order the server made and answered 201 for.
func addOrder(o *Observed, user string) {
	o.Orders = append(o.Orders, Order{ID: int64(len(o.Orders) + 1), ProductID: 1, UserID: user})
	o.After.Sold++
	o.Created++
	o.CreatedByUser[user]++
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name     string
		observed func() Observed
		want     map[int]Status // invariants not listed must PASS
		oversold bool
		detail   string // expected in the failing invariant's detail
	}{
		{
			name:     "correct sale, sold out",
			observed: func() Observed { return sale(10, 10, 50) },
		},
		{
			name: "oversell: lost stock update, stock + sold > S",
			observed: func() Observed {
				o := sale(10, 10, 50)
				addOrder(&o, "lt-1-10")
				addOrder(&o, "lt-1-11")
				o.After.Stock = 0 // two decrements were lost
				return o
			},
			want:     map[int]Status{3: Fail},
			oversold: true,
			detail:   "oversold by 2",
		},
		{
			name: "negative stock",
			observed: func() Observed {
				o := sale(10, 10, 50)
				addOrder(&o, "lt-1-10")
				o.After.Stock = -1
				return o
			},
			want:     map[int]Status{1: Fail},
			oversold: true,
			detail:   "stock -1",
		},
		{
			name: "a user holds two orders",
			observed: func() Observed {
				o := sale(10, 9, 50)
				addOrder(&o, "lt-1-3")
				o.After.Stock = 0
				return o
			},
			want:     map[int]Status{5: Fail},
			oversold: true,
			detail:   "e.g. lt-1-3",
		},
		{
			name: "a user got two 201s for one order",
			observed: func() Observed {
				o := sale(10, 10, 50)
				o.Created++
				o.CreatedByUser["lt-1-4"]++
				return o
			},
			want:     map[int]Status{4: Fail, 5: Fail},
			oversold: true,
		},
		{
			name: "more 201s than orders: an acknowledged purchase was lost",
			observed: func() Observed {
				o := sale(10, 10, 50)
				o.Created = 11
				return o
			},
			want:     map[int]Status{4: Fail},
			oversold: true,
			detail:   "201 answers 11, orders by this run 10",
		},
		{
			name: "an order nobody got a 201 for, and no unknown outcome to explain it",
			observed: func() Observed {
				o := sale(10, 10, 50)
				o.Created = 9
				return o
			},
			want:     map[int]Status{4: Fail},
			oversold: true,
		},
		{
			name: "an order without 201 explained by a timed-out request",
			observed: func() Observed {
				o := sale(10, 10, 50)
				o.Created = 9
				o.Unknown = 3
				return o
			},
		},
		{
			name: "sold differs from the orders",
			observed: func() Observed {
				o := sale(10, 10, 50)
				o.After.Sold = 9
				o.After.Stock = 1
				return o
			},
			want:     map[int]Status{2: Fail, 6: Warn},
			oversold: true,
			detail:   "sold 9, orders listed 10",
		},
		{
			name: "orders made before the run are part of S",
			observed: func() Observed {
				o := sale(10, 6, 50)
				o.Before = Product{ID: 1, Stock: 6, Sold: 4}
				o.After = Product{ID: 1, Stock: 0, Sold: 10}
				for i := range 4 {
					o.Orders = append(o.Orders, Order{ProductID: 1, UserID: fmt.Sprintf("earlier-%d", i)})
				}
				return o
			},
		},
		{
			name:     "undersold: demand exceeded stock, stock left",
			observed: func() Observed { return sale(10, 7, 50) },
			want:     map[int]Status{6: Warn},
			detail:   "undersold",
		},
		{
			name: "stock left but the run was interrupted",
			observed: func() Observed {
				o := sale(10, 7, 50)
				o.EndedNormally = false
				return o
			},
			want: map[int]Status{6: Skip},
		},
		{
			name:     "stock left and demand did not exceed it",
			observed: func() Observed { return sale(10, 7, 7) },
			want:     map[int]Status{6: Skip},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.observed())
			if len(got) != 6 {
				t.Fatalf("got %d invariants, want 6", len(got))
			}
			var details []string
			for i, inv := range got {
				if inv.Number != i+1 {
					t.Errorf("got invariant %d at index %d", inv.Number, i)
				}
				want, ok := tc.want[inv.Number]
				if !ok {
					want = Pass
				}
				if inv.Status != want {
					t.Errorf("(%d) %s: got %s (%s), want %s", inv.Number, inv.Name, inv.Status, inv.Detail, want)
				}
				if inv.Status != Pass {
					details = append(details, inv.Detail)
				}
			}
			if o := Oversold(got); o != tc.oversold {
				t.Errorf("got Oversold %v, want %v", o, tc.oversold)
			}
			if tc.detail != "" && !strings.Contains(strings.Join(details, "; "), tc.detail) {
				t.Errorf("got details %q, want one mentioning %q", details, tc.detail)
			}
		})
	}
}

func TestOnlySafetyFailuresAreOversold(t *testing.T) {
	results := []Invariant{{Number: 6, Safety: false, Status: Fail}, {Number: 1, Safety: true, Status: Warn}}
	if Oversold(results) {
		t.Error("got Oversold for failures outside safety, want false")
	}
}
