package loadtest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// reservingSale is a made-up observation of a correct sale with a payment
// window of 100 ms, S = 10: buyers 0-5 paid (orders 1-6), 6 and 7
// cancelled (7, 8), 8 and 9 let their windows pass (9, 10; 8 then paid
// late and was refused), and the four units that came back were bought
// again: by 8 (order 11, paid), 10 (12, paid), 11 (13, pending, not yet
// due when the orders were listed) and 12 (14, expired).
func reservingSale() Observed {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(ms(n)) }
	o := Observed{
		Before:        Product{ID: 1, Stock: 10},
		After:         Product{ID: 1, Stock: 1, Reserved: 1, Sold: 8},
		UserPrefix:    "lt-1-",
		CreatedByUser: map[string]int{},
		Demand:        30,
		EndedNormally: true,
		Reserving:     true,
		Listed:        at(1000),
		Lag:           200 * time.Millisecond,
	}
	add := func(user int, made int, state string, closed int) int64 {
		u := fmt.Sprintf("lt-1-%d", user)
		ord := Order{ID: int64(len(o.Orders) + 1), ProductID: 1, UserID: u, CreatedAt: at(made), State: state, ExpiresAt: at(made + 100)}
		if closed > 0 {
			ord.ClosedAt = at(closed)
		}
		o.Orders = append(o.Orders, ord)
		o.Created++
		o.CreatedByUser[u]++
		return ord.ID
	}
	move := func(kind OpKind, id int64, call, status int, code string) {
		ord := o.Orders[id-1]
		o.Moves = append(o.Moves, Move{Kind: kind, Product: 1, Order: id, Status: status, Code: code, Call: at(call), Due: ord.ExpiresAt})
	}
	for u := range 6 {
		id := add(u, 10, StatePaid, 50)
		move(OpPay, id, 40, 200, "")
	}
	for u := 6; u < 8; u++ {
		id := add(u, 10, StateCancelled, 30)
		move(OpCancel, id, 20, 200, "")
	}
	add(8, 10, StateExpired, 130)
	add(9, 10, StateExpired, 130)
	move(OpPay, 9, 150, 409, codeOrderExpired)
	id := add(8, 140, StatePaid, 160) // bought again after the expiry
	move(OpPay, id, 150, 200, "")
	id = add(10, 140, StatePaid, 160)
	move(OpPay, id, 150, 200, "")
	add(11, 950, StatePending, 0)
	add(12, 140, StateExpired, 260)
	return o
}

// order returns the observation's order id, to change it.
func order(o *Observed, id int64) *Order { return &o.Orders[id-1] }

func TestCheckReservations(t *testing.T) {
	cases := []struct {
		name     string
		observed func() Observed
		want     map[int]Status // invariants not listed must PASS
		detail   string         // expected in the failing invariant's detail
	}{
		{
			name:     "correct sale: paid, cancelled, lapsed, bought again",
			observed: reservingSale,
			want:     map[int]Status{6: Skip},
		},
		{
			name: "every unit sold after a close-out",
			observed: func() Observed {
				o := reservingSale()
				ord := order(&o, 13)
				ord.State, ord.ClosedAt = StatePaid, ord.CreatedAt.Add(ms(5))
				o.Moves = append(o.Moves, Move{Kind: OpPay, Product: 1, Order: 13, Status: 200, Call: ord.CreatedAt, Due: ord.ExpiresAt})
				addOrder(&o, "lt-1-13") // a close-out buyer took the last unit
				order(&o, 15).State = StatePaid
				o.After = Product{ID: 1, Stock: 0, Reserved: 0, Sold: 10}
				o.Finished = true
				return o
			},
		},
		{
			name: "undersold: the buyers paid, and a unit is left",
			observed: func() Observed {
				o := reservingSale()
				o.Finished = true
				return o
			},
			want:   map[int]Status{6: Warn},
			detail: "yet sold 8",
		},
		{
			// UNSAFE_EXPIRY=unchecked: a paid order expired, its unit put
			// back on sale. The sum still adds up.
			name: "a paid order expired",
			observed: func() Observed {
				o := reservingSale()
				order(&o, 3).State = StateExpired
				o.After.Stock++
				o.After.Reserved--
				return o
			},
			want:   map[int]Status{2: Fail, 6: Skip, 8: Fail},
			detail: "order 3 was answered 200 to its payment at 03:04:05.040, and ended expired",
		},
		{
			// UNSAFE_PAY_LATE on a pending order: the counts add up, the
			// clocks do not.
			name: "a payment accepted after the window, before the expiry",
			observed: func() Observed {
				o := reservingSale()
				ord := order(&o, 13)
				o.Moves = append(o.Moves, Move{Kind: OpPay, Product: 1, Order: 13, Status: 200, Call: ord.ExpiresAt.Add(ms(20)), Due: ord.ExpiresAt})
				o.Listed = ord.ExpiresAt.Add(ms(40))
				ord.State, ord.ClosedAt = StatePaid, ord.ExpiresAt.Add(ms(21))
				o.After.Reserved--
				o.After.Sold++
				return o
			},
			want:   map[int]Status{6: Skip, 9: Fail},
			detail: "order 13: a payment sent 20ms after its window ended was answered 200; order 13 was paid at 03:04:06.071, 21ms after its window ended",
		},
		{
			// UNSAFE_PAY_LATE on an expired order: its unit is counted
			// sold as well as back on sale, and its buyer, who bought
			// again meanwhile, now holds two paid orders.
			name: "a payment accepted after the expiry",
			observed: func() Observed {
				o := reservingSale()
				o.Moves[len(o.Moves)-3].Status, o.Moves[len(o.Moves)-3].Code = 200, "" // order 9's late payment
				ord := order(&o, 9)
				ord.State, ord.ClosedAt = StatePaid, ord.ExpiresAt.Add(ms(40))
				o.After.Sold++
				return o
			},
			want:   map[int]Status{3: Fail, 5: Fail, 6: Skip, 9: Fail},
			detail: "oversold by 1",
		},
		{
			// UNSAFE_EXPIRY=unlocked: a purchase between the expiry's read
			// and its write lost its decrement.
			name: "a lost update under an unlocked expiry",
			observed: func() Observed {
				o := reservingSale()
				o.After.Stock++
				return o
			},
			want:   map[int]Status{3: Fail, 6: Skip},
			detail: "available 2 + reserved 1 + sold 8 = 11, S = 10: oversold by 1",
		},
		{
			name: "an order paid and cancelled",
			observed: func() Observed {
				o := reservingSale()
				o.Moves = append(o.Moves, Move{Kind: OpCancel, Product: 1, Order: 1, Status: 200, Call: order(&o, 1).CreatedAt})
				return o
			},
			want:   map[int]Status{6: Skip, 7: Fail},
			detail: "order 1 was answered 200 to 2 moves (pay, cancel)",
		},
		{
			name: "a cancel accepted, and the order expired",
			observed: func() Observed {
				o := reservingSale()
				order(&o, 7).State = StateExpired
				return o
			},
			want:   map[int]Status{6: Skip, 7: Fail},
			detail: "order 7 was answered 200 to a cancel, and ended expired",
		},
		{
			name: "an order pending again after it closed",
			observed: func() Observed {
				o := reservingSale()
				order(&o, 14).State = StatePending
				o.After.Stock--
				o.After.Reserved++
				return o
			},
			want:   map[int]Status{6: Skip, 7: Fail, 10: Fail},
			detail: "order 14 is pending again after it closed at 03:04:05.260",
		},
		{
			name: "a reservation forgotten by the expiry",
			observed: func() Observed {
				o := reservingSale()
				o.Listed = order(&o, 13).ExpiresAt.Add(ms(201))
				return o
			},
			want:   map[int]Status{6: Skip, 10: Fail},
			detail: "order 13 is pending 201ms past its window",
		},
		{
			name: "reserved without a pending order",
			observed: func() Observed {
				o := reservingSale()
				o.After.Reserved++
				o.After.Stock--
				return o
			},
			want:   map[int]Status{2: Fail, 6: Skip},
			detail: "reserved 2, pending orders 1",
		},
		{
			name: "reserved below 0",
			observed: func() Observed {
				o := reservingSale()
				o.After.Reserved = -1
				o.After.Stock = 3
				return o
			},
			want:   map[int]Status{1: Fail, 2: Fail, 6: Skip},
			detail: "available 3, reserved -1",
		},
		{
			name: "a buyer who paid holds a second order",
			observed: func() Observed {
				o := reservingSale()
				order(&o, 12).UserID = "lt-1-0"
				return o
			},
			want:   map[int]Status{5: Fail, 6: Skip},
			detail: "users with two live orders 1, e.g. lt-1-0",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.observed())
			if len(got) != 10 {
				t.Fatalf("got %d invariants, want 10", len(got))
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
			fails := false
			for _, st := range tc.want {
				fails = fails || st == Fail
			}
			if o := Oversold(got); o != fails {
				t.Errorf("got Oversold %v, want %v", o, fails)
			}
			if tc.detail != "" && !strings.Contains(strings.Join(details, "; "), tc.detail) {
				t.Errorf("got details %q, want one mentioning %q", details, tc.detail)
			}
		})
	}
}
