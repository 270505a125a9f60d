package demo

import (
	"fmt"
	"slices"
	"strings"
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

// lockLife is a lock design reservation row's result with a made-up end:
// S 50, the product p, 12 pending orders within their window and 8 paid
// before theirs (each payment answered 200), as edit changes them, and
// the fault's evidence x.
func lockLife(f designFault, p lifeProduct, x expiryEvidence, edit func(l *lifeEvidence, o []lifeOrder)) *result {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	l := lifeEvidence{supply: 50, available: p.Stock, reserved: p.Reserved, sold: p.Sold, lag: time.Second, readAt: t0,
		moved: map[int64]string{}}
	var orders []lifeOrder
	for i := range int64(20) {
		o := lifeOrder{ID: i + 1, UserID: fmt.Sprintf("u%d", i), State: "pending", ExpiresAt: t0.Add(time.Second)}
		if i >= 12 {
			o.State, o.ExpiresAt, o.ClosedAt = "paid", t0, t0.Add(-time.Second)
			l.moved[o.ID] = "paid"
		}
		orders = append(orders, o)
	}
	if edit != nil {
		edit(&l, orders)
	}
	for _, o := range orders {
		switch o.State {
		case "pending":
			l.pending++
		case "paid":
			l.paid++
		}
	}
	l.created = len(orders)
	l.checks = lifeChecks(l, orders)
	var r *result
	for _, rw := range lockLifeRows() {
		if rw.design.fault == f {
			r = &result{row: rw, ran: true, dev: designEvidence{life: l, expiry: x}}
		}
	}
	r.rep.Invariants = l.checks
	return r
}

// The lock design's reservation rows' verdicts: a row that must hold
// fails on any failed check, is "fault not injected" without its
// evidence, and passes with it; a control passes only when the checks it
// breaks fail, and no other, is "not caught" when its checks pass though
// its fault happened, and "fault not injected" when neither.
func TestLockLifeVerdict(t *testing.T) {
	held := lifeProduct{Stock: 30, Reserved: 12, Sold: 8}
	twice := lifeProduct{Stock: 31, Reserved: 12, Sold: 8} // a unit returned twice
	together := expiryEvidence{expired: [2]int64{10, 7}, contended: [2]int64{2, 1}}
	killed := expiryEvidence{held: 1, locks: 1, due: 6, takenOver: 6, survivorExpired: 6}
	stopped := expiryEvidence{held: 1, locks: 1, due: 6, takenOver: 6, survivorExpired: 6, refused: 1, leasesLost: 1}
	raced := expiryEvidence{sent: 17, sentLate: 5, accepted: 12, refusedLate: 5, inRound: true}
	bought := expiryEvidence{sent: 5, accepted: 5, inRound: true}
	paidExpired := func(_ *lifeEvidence, o []lifeOrder) { o[19].State = "expired" } // moved "paid"
	paidLate := func(_ *lifeEvidence, o []lifeOrder) { o[19].ClosedAt = o[19].ExpiresAt.Add(time.Millisecond) }
	with := func(x expiryEvidence, edit func(*expiryEvidence)) expiryEvidence { edit(&x); return x }
	for _, tt := range []struct {
		name string
		r    *result
		want string
	}{
		{"together", lockLife(faultExpireTogether, held, together, nil), "ok"},
		{"together, a unit returned twice", lockLife(faultExpireTogether, twice, together, nil), "mismatch"},
		{"together, one replica expired nothing", lockLife(faultExpireTogether, held, with(together, func(x *expiryEvidence) { x.expired[1] = 0 }), nil), "fault not injected"},
		{"together, one after the other", lockLife(faultExpireTogether, held, with(together, func(x *expiryEvidence) { x.contended = [2]int64{} }), nil), "fault not injected"},
		{"killed", lockLife(faultExpiryKill, held, killed, nil), "ok"},
		{"killed, a unit returned twice", lockLife(faultExpiryKill, twice, killed, nil), "mismatch"},
		{"killed outside the critical section", lockLife(faultExpiryKill, held, with(killed, func(x *expiryEvidence) { x.held = 0 }), nil), "fault not injected"},
		{"killed with nothing due", lockLife(faultExpiryKill, held, with(killed, func(x *expiryEvidence) { x.due, x.takenOver, x.survivorExpired = 0, 0, 0 }), nil), "fault not injected"},
		{"killed, the survivor expired some", lockLife(faultExpiryKill, held, with(killed, func(x *expiryEvidence) { x.takenOver = 5 }), nil), "mismatch"},
		{"stopped", lockLife(faultExpiryStop, held, stopped, nil), "ok"},
		{"stopped, a unit returned twice", lockLife(faultExpiryStop, twice, stopped, nil), "mismatch"},
		{"stopped, no write refused", lockLife(faultExpiryStop, held, with(stopped, func(x *expiryEvidence) { x.refused = 0 }), nil), "fault not injected"},
		{"stopped, no takeover", lockLife(faultExpiryStop, held, with(stopped, func(x *expiryEvidence) { x.takenOver, x.survivorExpired = 0, 0 }), nil), "fault not injected"},
		{"payment race", lockLife(faultPayRace, held, raced, nil), "ok"},
		{"payment race, a paid order expired", lockLife(faultPayRace, held, raced, paidExpired), "mismatch"},
		{"payment race, a payment after its window", lockLife(faultPayRace, held, raced, paidLate), "mismatch"},
		{"payment race, the expiry wrote meanwhile", lockLife(faultPayRace, held, with(raced, func(x *expiryEvidence) { x.inRound = false }), nil), "fault not injected"},
		{"payment race, all before their window", lockLife(faultPayRace, held, with(raced, func(x *expiryEvidence) { x.refusedLate, x.sentLate = 0, 0 }), nil), "fault not injected"},
		{"unlocked, caught", lockLife(faultUnlockedExpiry, twice, bought, nil), "ok"},
		{"unlocked, not caught", lockLife(faultUnlockedExpiry, held, bought, nil), "not caught"},
		{"unlocked, nobody bought in between", lockLife(faultUnlockedExpiry, held, with(bought, func(x *expiryEvidence) { x.inRound = false }), nil), "fault not injected"},
		{"unlocked, failed without its fault", lockLife(faultUnlockedExpiry, twice, expiryEvidence{}, nil), "mismatch"},
		{"unlocked, caught by another check", lockLife(faultUnlockedExpiry, held, bought, paidLate), "mismatch"},
		{"unchecked, caught", lockLife(faultUncheckedExpiry, lifeProduct{Stock: 31, Reserved: 11, Sold: 8}, expiryEvidence{extra: 1}, paidExpired), "ok"},
		{"unchecked, not caught", lockLife(faultUncheckedExpiry, held, expiryEvidence{extra: 1}, nil), "not caught"},
		{"unchecked, nothing moved twice", lockLife(faultUncheckedExpiry, held, expiryEvidence{}, nil), "fault not injected"},
		{"pay late, caught", lockLife(faultPayLate, held, raced, paidLate), "ok"},
		{"pay late, not caught", lockLife(faultPayLate, held, raced, nil), "not caught"},
		{"pay late, no payment late", lockLife(faultPayLate, held, with(raced, func(x *expiryEvidence) { x.sentLate = 0 }), nil), "fault not injected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, facts := tt.r.designVerdict(); got != tt.want {
				t.Errorf("got %q (%s), want %q", got, facts, tt.want)
			}
		})
	}
}

// A control whose checks pass, though its fault happened, fails the
// matrix as not caught, and one that is caught names the checks that
// failed; a row without its fault runs again.
func TestLockLifeJudge(t *testing.T) {
	bought := expiryEvidence{sent: 5, accepted: 5, inRound: true}
	v, why := lockLife(faultUnlockedExpiry, lifeProduct{Stock: 30, Reserved: 12, Sold: 8}, bought, nil).judge()
	if v != verdictMismatch || !strings.Contains(why, "NOT CAUGHT") {
		t.Errorf("a control whose checks passed: got %s: %s; want a mismatch, NOT CAUGHT", v, why)
	}
	v, why = lockLife(faultUnlockedExpiry, lifeProduct{Stock: 31, Reserved: 12, Sold: 8}, bought, nil).judge()
	if v != verdictOK || !strings.Contains(why, "must fail 2 (available + reserved + sold == S), 5 (available + pending + paid == S)") {
		t.Errorf("a control caught: got %s: %s; want ok, naming checks 2 and 5", v, why)
	}
	r := lockLife(faultExpiryStop, lifeProduct{Stock: 30, Reserved: 12, Sold: 8}, expiryEvidence{}, nil)
	if v, _ := r.judge(); v != verdictNoFault || !r.rerun() {
		t.Errorf("a row without its fault: got %s, rerun %v; want fault not injected, run again", v, r.rerun())
	}
}
