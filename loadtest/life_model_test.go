package loadtest

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-written histories of a sale with a payment window: orders made
// pending, then paid, cancelled, or expired by the service (an OpExpire
// rebuilt from the listing), in milliseconds from the start as in
// linearizability_test.go.

// hReserve is a 201 that made order id, due at due.
func hReserve(user string, call, ret int, id int64, due int) Op {
	op := hBuy(user, call, ret, c201, "")
	op.Order, op.Due = id, ptr(ms(due))
	return op
}

// hMove is a payment or a cancel of order id (due at due) by user.
func hMove(kind OpKind, user string, id int64, due, call, ret, status int, code string) Op {
	return Op{Kind: kind, Product: 1, Target: "http://a", User: user, Order: id, Due: ptr(ms(due)),
		Call: ms(call), Return: ms(ret), Status: status, Code: code, Result: ResultOK}
}

func hPay(user string, id int64, due, call, ret, status int, code string) Op {
	return hMove(OpPay, user, id, due, call, ret, status, code)
}

func hCancel(user string, id int64, due, call, ret, status int, code string) Op {
	return hMove(OpCancel, user, id, due, call, ret, status, code)
}

// hExpire is an expiry round of orders, due (the latest window's end) at
// call, closed at ret.
func hExpire(call, ret int, orders ...int64) Op {
	return Op{Kind: OpExpire, Product: 1, Orders: orders, Call: ms(call), Return: ms(ret), Result: ResultOK}
}

// hLook is a read that shows a reserved count.
func hLook(call, ret int, stock, reserved, sold int64) Op {
	op := hRead(call, ret, stock, sold)
	op.Reserved = ptr(reserved)
	return op
}

const (
	c200      = http.StatusOK
	expired   = codeOrderExpired
	cancelled = codeOrderCancelled
	paid      = codeOrderPaid
)

func TestCheckHistoryOfReservations(t *testing.T) {
	// A sale of 2 units with a window of 100 ms: u1 pays, u2 cancels and
	// buys again, u3 lapses and pays late, u4 takes the unit back, u5
	// lapses too.
	good := []Op{
		hCreate(1, 2),
		hReserve("u1", 2, 4, 1, 102), hReserve("u2", 3, 5, 2, 103),
		hLook(6, 7, 0, 2, 0),
		hPay("u1", 1, 102, 10, 12, c200, ""),
		hLook(13, 14, 0, 1, 1),
		hCancel("u2", 2, 103, 20, 22, c200, ""),
		hBuy("u1", 23, 24, c409, twice),        // paid: holds it
		hReserve("u2", 25, 26, 3, 125),         // cancelled: may buy again
		hPay("u1", 1, 102, 27, 28, c409, paid), // paid already
		hCancel("u2", 2, 103, 29, 30, c409, cancelled),
		hBuy("u3", 31, 32, c409, sold),
		hLook(33, 34, 0, 1, 1),
		hPay("u2", 3, 125, 124, 127, c409, expired), // at the edge: its window may have ended
		hExpire(125, 131, 3),
		hLook(132, 133, 1, 0, 1),
		hPay("u2", 3, 125, 140, 141, c409, expired), // late, and expired
		hReserve("u4", 142, 143, 4, 243),
		hLook(144, 145, 0, 1, 1),
		hPay("u4", 4, 243, 146, 148, c200, ""),
		hLook(150, 151, 0, 0, 2),
	}
	cases := []struct {
		name    string
		ops     []Op
		want    LinVerdict
		anomaly []string
	}{
		{"linearizable: paid, cancelled, bought again, expired, paid late and refused, bought again", good, LinYes, nil},
		{
			// The control of UNSAFE_PAY_LATE: a payment called after the
			// window ended, accepted, of an order no replica had expired
			// yet. The counts add up; only the time shows it.
			name: "a payment accepted after its window",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hPay("u1", 1, 102, 110, 112, c200, ""),
				hLook(113, 114, 0, 0, 1),
			},
			want:    LinNO(),
			anomaly: []string{"pay of order 1 by u1 -> 200 (a, 0.110-0.112s)"},
		},
		{
			// The control of UNSAFE_PAY_LATE after the expiry: the unit is
			// back on sale and sold again.
			name: "a payment accepted after the order expired",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hExpire(102, 106, 1),
				hPay("u1", 1, 102, 110, 112, c200, ""),
			},
			want:    LinNO(),
			anomaly: []string{"pay of order 1 by u1 -> 200"},
		},
		{
			// The control of UNSAFE_EXPIRY=unchecked: an order paid in its
			// window expired all the same, its unit put back on sale.
			name: "a paid order expired",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hPay("u1", 1, 102, 10, 12, c200, ""),
				hExpire(102, 106, 1),
			},
			want:    LinNO(),
			anomaly: []string{"pay of order 1 by u1 -> 200", "expiry of order(s) 1"},
		},
		{
			// A unit returned twice: cancelled, and expired as well.
			name: "a cancelled order expired",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hCancel("u1", 1, 102, 10, 12, c200, ""),
				hLook(13, 14, 1, 0, 0),
				hExpire(102, 106, 1),
				hLook(107, 108, 2, -1, 0),
			},
			want: LinNO(),
		},
		{
			// The control of UNSAFE_EXPIRY=unlocked: a purchase between the
			// expiry's read and its write-back loses its decrement, and a
			// read shows the unit twice.
			name: "a purchase lost under an unlocked expiry",
			ops: []Op{
				hCreate(1, 2),
				hReserve("u1", 2, 4, 1, 102),
				hReserve("u2", 103, 105, 2, 205),
				hExpire(102, 110, 1),
				hLook(111, 112, 2, 1, 0),
			},
			want:    LinNO(),
			anomaly: []string{"stock + reserved + sold = 3, not 2"},
		},
		{
			name: "an expiry before its window",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hLook(50, 51, 1, 0, 0),
				hExpire(102, 40, 1),
			},
			want:    LinNO(),
			anomaly: []string{"expired before its window ended", "expiry of order(s) 1 (expiry, due 0.102s, closed by 0.040s)"},
		},
		{
			name: "a window found over before it ended",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hPay("u1", 1, 102, 10, 12, c409, expired),
			},
			want:    LinNO(),
			anomaly: []string{"pay of order 1 by u1 -> 409 order_expired"},
		},
		{
			name: "an order paid and cancelled",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hPay("u1", 1, 102, 10, 20, c200, ""),
				hCancel("u1", 1, 102, 11, 21, c200, ""),
			},
			want: LinNO(),
		},
		{
			name: "a second order for a buyer who paid",
			ops: []Op{
				hCreate(1, 2),
				hReserve("u1", 2, 4, 1, 102),
				hPay("u1", 1, 102, 10, 12, c200, ""),
				hReserve("u1", 13, 14, 2, 114),
			},
			want:    LinNO(),
			anomaly: []string{"purchase by u1 -> 201 order 2"},
		},
		{
			// A payment whose answer was lost may have paid: the read
			// after it says it did, and a second payment finds it paid.
			name: "a lost payment that took effect",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				lost(hPay("u1", 1, 102, 10, 12, c200, "")),
				hLook(20, 21, 0, 0, 1),
				hPay("u1", 1, 102, 22, 23, c409, paid),
			},
			want: LinYes,
		},
		{
			// A sale of a second wave: the unit that came back is bought
			// again while the first buyer's late payment is refused.
			name: "a unit that came back, sold again",
			ops: []Op{
				hCreate(1, 1),
				hReserve("u1", 2, 4, 1, 102),
				hBuy("u2", 50, 51, c409, sold),
				hExpire(102, 106, 1),
				hReserve("u3", 104, 108, 2, 208), // after the expiry committed
				hPay("u1", 1, 102, 109, 110, c409, expired),
				hPay("u3", 2, 208, 111, 112, c200, ""),
				hLook(113, 114, 0, 0, 1),
			},
			want: LinYes,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckHistory(tc.ops, CheckOptions{Timeout: 10 * time.Second})
			if got.Verdict != tc.want {
				t.Fatalf("got %s, want %s", got.Line(), tc.want)
			}
			if ok := porcupine.CheckOperations(linModel, newLinHistory(tc.ops).all()); ok != (tc.want == LinYes) {
				t.Errorf("the model alone: got linearizable %v, want %v", ok, tc.want == LinYes)
			}
			for _, s := range tc.anomaly {
				if !strings.Contains(got.Anomaly, s) {
					t.Errorf("anomaly %q lacks %q", got.Anomaly, s)
				}
			}
			t.Log(got.Line())
		})
	}
}

// The expiry rounds rebuilt from the listing: one operation per round and
// product (the orders of one product with one closed_at), due at the
// latest window's end among them, closed by closed_at plus the truncation;
// an order without closed_at is a round of its own, closed by the time
// the orders were listed.
func TestExpiriesFromTheListing(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(n int) time.Time { return start.Add(ms(n)) }
	orders := []Order{
		{ID: 1, ProductID: 1, State: StateExpired, ExpiresAt: at(100), ClosedAt: at(130)},
		{ID: 2, ProductID: 1, State: StateExpired, ExpiresAt: at(110), ClosedAt: at(130)},
		{ID: 3, ProductID: 2, State: StateExpired, ExpiresAt: at(105), ClosedAt: at(130)}, // another product, same round
		{ID: 4, ProductID: 1, State: StatePaid, ExpiresAt: at(100), ClosedAt: at(50)},
		{ID: 5, ProductID: 1, State: StateExpired, ExpiresAt: at(200), ClosedAt: at(240)},
		{ID: 6, ProductID: 1, State: StateExpired, ExpiresAt: at(300)},
		{ID: 7, ProductID: 1, State: StatePending, ExpiresAt: at(400)},
	}
	got := expiries(orders, start, ms(500))
	want := []Op{
		{Kind: OpExpire, Product: 1, Orders: []int64{1, 2}, Call: ms(110), Return: ms(130) + closedSlack, Result: ResultOK},
		{Kind: OpExpire, Product: 1, Orders: []int64{5}, Call: ms(200), Return: ms(240) + closedSlack, Result: ResultOK},
		{Kind: OpExpire, Product: 1, Orders: []int64{6}, Call: ms(300), Return: ms(500), Result: ResultOK},
		{Kind: OpExpire, Product: 2, Orders: []int64{3}, Call: ms(105), Return: ms(130) + closedSlack, Result: ResultOK},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got rounds\n%+v\nwant\n%+v", got, want)
	}
}

// A buyer whose first order expired and whose purchase again got no
// answer: the order the listing shows that no 201 made is that purchase's,
// by its id, and the check holds it to it.
func TestSettleByOrderID(t *testing.T) {
	ops := []Op{
		hCreate(1, 1),
		hReserve("u1", 2, 4, 1, 102),
		hExpire(102, 106, 1),
		lost(hBuy("u1", 110, 112, 0, "")),
		hReserve("u2", 113, 114, 9, 214), // sold out, in truth: order 2 holds the unit
	}
	orders := []Order{
		{ID: 1, ProductID: 1, UserID: "u1", State: StateExpired},
		{ID: 2, ProductID: 1, UserID: "u1", State: StatePending},
		{ID: 9, ProductID: 1, UserID: "u2", State: StatePending},
	}
	settle(ops, orders, ms(120))
	if op := ops[3]; op.Settled != SettledOrder || op.Order != 2 || op.SettledBy != ms(120) {
		t.Fatalf("the lost purchase: got settled %q, order %d, by %v; want order 2 by 120ms", op.Settled, op.Order, op.SettledBy)
	}
	// Both purchases made their orders, after order 1 came back: one of
	// the two 201s is too many for a stock of 1.
	if got := CheckHistory(ops, CheckOptions{}); got.Verdict != LinNo {
		t.Errorf("got %s, want NO: two orders held for a stock of 1", got.Line())
	}
	ops = ops[:4]
	if got := CheckHistory(ops, CheckOptions{}); got.Verdict != LinYes {
		t.Errorf("without the second buyer: got %s, want yes", got.Line())
	}
}
