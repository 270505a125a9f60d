package demo

import (
	"slices"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// lifeResult is a reservation row's result with a made-up end: S 50, the
// product and the orders given, and the units the victim held.
func lifeResult(f designFault, o designOutcome, p lifeProduct, pending, paid int64, held int64, missing string) *result {
	l := lifeEvidence{supply: 50, available: p.Stock, reserved: p.Reserved, sold: p.Sold, pending: pending, paid: paid,
		created: int(pending + paid), victimMoved: int(held)}
	var orders []lifeOrder
	for i := range pending + paid {
		st := "pending"
		if i >= pending {
			st = "paid"
		}
		orders = append(orders, lifeOrder{ID: i + 1, UserID: string(rune('a' + i)), State: st})
	}
	l.checks = lifeChecks(l, orders)
	r := &result{row: row{design: &designRow{design: app.DesignCounter, fault: f, outcome: o}}, ran: true,
		dev: designEvidence{held: held, missing: missing, life: l}}
	r.rep.Invariants = l.checks
	return r
}

// The reservation rows' verdicts: the drift the kill must show, exactly,
// is told apart from a sale that lost nothing, one that lost other units
// than those held, one that sold a unit twice, and a kill that did not
// happen; a row that must hold fails on any drift.
func TestLifeVerdict(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    *result
		want string
	}{
		{"holds", lifeResult(faultReservations, outcomeHolds, lifeProduct{Stock: 30, Reserved: 12, Sold: 8}, 12, 8, 0, ""), "ok"},
		{"holds, but a unit reserved for no order", lifeResult(faultReservations, outcomeHolds, lifeProduct{Stock: 29, Reserved: 13, Sold: 8}, 12, 8, 0, ""), "mismatch"},
		{"holds, but a unit given back twice", lifeResult(faultReservations, outcomeHolds, lifeProduct{Stock: 31, Reserved: 11, Sold: 8}, 12, 8, 0, ""), "mismatch"},
		{"kill loses the units held", lifeResult(faultReturnKill, outcomeLosesUnits, lifeProduct{Stock: 27, Reserved: 15, Sold: 8}, 12, 8, 3, ""), "ok"},
		{"kill lost nothing", lifeResult(faultReturnKill, outcomeLosesUnits, lifeProduct{Stock: 30, Reserved: 12, Sold: 8}, 12, 8, 3, ""), "mismatch"},
		{"kill lost more than it held", lifeResult(faultReturnKill, outcomeLosesUnits, lifeProduct{Stock: 26, Reserved: 16, Sold: 8}, 12, 8, 3, ""), "mismatch"},
		{"kill lost units and sold one twice", lifeResult(faultReturnKill, outcomeLosesUnits, lifeProduct{Stock: 28, Reserved: 15, Sold: 8}, 12, 8, 3, ""), "mismatch"},
		{"kill never happened", lifeResult(faultReturnKill, outcomeLosesUnits, lifeProduct{Stock: 30, Reserved: 12, Sold: 8}, 12, 8, 0,
			"the victim never held the 3 units between the two writes"), "fault not injected"},
		{"kill held nothing", lifeResult(faultReturnKill, outcomeLosesUnits, lifeProduct{Stock: 30, Reserved: 12, Sold: 8}, 12, 8, 0, ""), "fault not injected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, facts := tt.r.designVerdict(); got != tt.want {
				t.Errorf("got %q (%s), want %q", got, facts, tt.want)
			}
		})
	}
}

// lifeChecks fails the check of each way the end can be wrong, and only
// that one.
func TestLifeChecks(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ok := lifeEvidence{supply: 10, available: 5, reserved: 3, sold: 2, pending: 3, paid: 2, created: 5}
	orders := []lifeOrder{{ID: 1, UserID: "a", State: "pending"}, {ID: 2, UserID: "b", State: "pending"}, {ID: 3, UserID: "c", State: "pending"},
		{ID: 4, UserID: "d", State: "paid"}, {ID: 5, UserID: "e", State: "paid"}, {ID: 6, UserID: "a", State: "cancelled"}}
	ok.created = len(orders)
	for _, tt := range []struct {
		name   string
		edit   func(l *lifeEvidence, o []lifeOrder) []lifeOrder
		failed []int
	}{
		{"all hold", func(*lifeEvidence, []lifeOrder) []lifeOrder { return nil }, nil},
		{"stock below zero", func(l *lifeEvidence, _ []lifeOrder) []lifeOrder { l.available, l.supply = -1, 4; return nil }, []int{1}},
		{"a unit reserved for no order", func(l *lifeEvidence, _ []lifeOrder) []lifeOrder { l.available, l.reserved = 4, 4; return nil }, []int{3, 5}},
		{"sold off the paid orders", func(l *lifeEvidence, _ []lifeOrder) []lifeOrder { l.sold, l.reserved = 3, 2; return nil }, []int{3, 4}},
		{"counted twice", func(l *lifeEvidence, _ []lifeOrder) []lifeOrder { l.available = 6; return nil }, []int{2, 5}},
		{"two live orders of a user", func(_ *lifeEvidence, o []lifeOrder) []lifeOrder {
			return append(o[:5:5], lifeOrder{ID: 6, UserID: "a", State: "paid"})
		}, []int{6}},
		{"a 201 without an order", func(l *lifeEvidence, _ []lifeOrder) []lifeOrder { l.created++; return nil }, []int{6}},
		{"pending within its window + lag", func(l *lifeEvidence, o []lifeOrder) []lifeOrder {
			o[0].ExpiresAt, l.lag, l.readAt = t0, time.Second, t0.Add(time.Second)
			return nil
		}, nil},
		{"pending past its window + lag", func(l *lifeEvidence, o []lifeOrder) []lifeOrder {
			o[0].ExpiresAt, l.lag, l.readAt = t0, time.Second, t0.Add(time.Second+time.Millisecond)
			return nil
		}, []int{7}},
		{"expired past its window + lag", func(l *lifeEvidence, o []lifeOrder) []lifeOrder {
			l.lag, l.created = time.Second, l.created+1
			return append(o, lifeOrder{ID: 7, UserID: "f", State: "expired", ExpiresAt: t0, ClosedAt: t0.Add(2 * time.Second)})
		}, []int{7}},
		{"expired, and when not recorded", func(l *lifeEvidence, o []lifeOrder) []lifeOrder {
			l.lag, l.created = time.Second, l.created+1
			return append(o, lifeOrder{ID: 7, UserID: "f", State: "expired", ExpiresAt: t0})
		}, []int{7}},
		{"a payment answered 200, the order not paid", func(l *lifeEvidence, _ []lifeOrder) []lifeOrder {
			l.moved = map[int64]string{1: "paid", 4: "paid"}
			return nil
		}, []int{8}},
		{"paid within its window", func(l *lifeEvidence, o []lifeOrder) []lifeOrder {
			o[3].ExpiresAt, o[3].ClosedAt = t0, t0.Add(-time.Millisecond)
			l.moved = map[int64]string{4: "paid", 6: "cancelled"}
			return nil
		}, nil},
		{"paid after its window", func(_ *lifeEvidence, o []lifeOrder) []lifeOrder {
			o[3].ExpiresAt, o[3].ClosedAt = t0, t0.Add(time.Microsecond)
			return nil
		}, []int{9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := ok
			o := append([]lifeOrder(nil), orders...)
			if edited := tt.edit(&l, o); edited != nil {
				o = edited
			}
			var failed []int
			for _, inv := range lifeChecks(l, o) {
				if inv.Status == loadtest.Fail {
					failed = append(failed, inv.Number)
				}
			}
			if !slices.Equal(failed, tt.failed) {
				t.Errorf("failed checks: got %v, want %v", failed, tt.failed)
			}
		})
	}
}
