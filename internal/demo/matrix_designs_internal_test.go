package demo

import (
	"testing"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// designResult is a design row's result with a made-up sale: stock 100,
// the orders, sold count and 201s given, the safety invariants listed as
// failed, and linearizability lin.
func designResult(d app.Design, f designFault, o designOutcome, orders, sold, created int, failed []int, lin loadtest.LinVerdict, ev designEvidence) *result {
	rep := loadtest.Report{Before: loadtest.Product{Stock: 100}, After: loadtest.Product{Sold: int64(sold)},
		RunOrders: orders, Created: created, Oversold: len(failed) > 0}
	rep.Linearizability.Verdict = lin
	for n := 1; n <= 5; n++ {
		status := loadtest.Pass
		for _, f := range failed {
			if f == n {
				status = loadtest.Fail
			}
		}
		rep.Invariants = append(rep.Invariants, loadtest.Invariant{Number: n, Safety: true, Status: status})
	}
	if f == faultRestock {
		rep.Restocks = 3
	}
	return &result{row: row{design: &designRow{design: d, fault: f, outcome: o}}, ran: true, rep: rep, dev: ev}
}

// The design rows' verdicts: each expected outcome is told apart from the
// others and from a sale without its fault, so that a design that breaks
// in another way than documented, or a fault that did not happen, fails
// the matrix.
func TestDesignVerdict(t *testing.T) {
	yes, no := loadtest.LinYes, loadtest.LinNo
	held := designEvidence{held: 5, builds: 2}
	for _, tt := range []struct {
		name string
		r    *result
		want string
	}{
		{"holds", designResult(app.DesignCounter, noDesignFault, outcomeHolds, 100, 100, 100, nil, yes, designEvidence{}), "ok"},
		{"holds, but oversold", designResult(app.DesignCounter, noDesignFault, outcomeHolds, 101, 101, 101, []int{3}, no, designEvidence{}), "mismatch"},
		{"holds, but not linearizable", designResult(app.DesignConditional, noDesignFault, outcomeHolds, 100, 100, 100, nil, no, designEvidence{}), "mismatch"},
		{"restocks, none answered", func() *result {
			r := designResult(app.DesignCounter, faultRestock, outcomeHolds, 100, 100, 100, nil, yes, designEvidence{})
			r.dev.missing = "no restock was answered during the sale"
			return r
		}(), "fault not injected"},
		{"kill loses sales", designResult(app.DesignCounter, faultKill, outcomeLosesSales, 98, 100, 98, []int{2}, no, designEvidence{held: 2}), "ok"},
		{"kill lost nothing", designResult(app.DesignCounter, faultKill, outcomeLosesSales, 100, 100, 100, nil, yes, designEvidence{held: 2}), "mismatch"},
		{"kill lost sales and oversold", designResult(app.DesignCounter, faultKill, outcomeLosesSales, 101, 103, 101, []int{2, 3}, no, designEvidence{held: 2}), "mismatch"},
		{"kill never happened", designResult(app.DesignCounter, faultKill, outcomeLosesSales, 100, 100, 100, nil, yes,
			designEvidence{missing: "the victim was never mid-sale"}), "fault not injected"},
		{"async kill, orders claimed", designResult(app.DesignCounterAsync, faultKill, outcomeHolds, 100, 100, 100, nil, yes,
			designEvidence{held: 1, claimed: 1}), "ok"},
		{"async kill, nothing claimed", designResult(app.DesignCounterAsync, faultKill, outcomeHolds, 100, 100, 100, nil, yes,
			designEvidence{held: 1}), "fault not injected"},
		{"restart sells twice", designResult(app.DesignCounter, faultRestart, outcomeSellsTwice, 104, 100, 104, []int{2}, no, held), "ok"},
		{"restart sells more twice than were held", designResult(app.DesignCounter, faultRestart, outcomeSellsTwice, 106, 100, 106, []int{2}, no, held), "mismatch"},
		{"restart sold nothing twice", designResult(app.DesignCounter, faultRestart, outcomeSellsTwice, 100, 100, 100, nil, yes, held), "mismatch"},
		{"async restart loses orders", designResult(app.DesignCounterAsync, faultRestart, outcomeLosesOrders, 102, 100, 150, []int{2, 4}, no, held), "ok"},
		{"async restart, a second 201", designResult(app.DesignCounterAsync, faultRestart, outcomeLosesOrders, 102, 100, 150, []int{2, 4, 5}, no, held), "mismatch"},
		{"async restart lost nothing", designResult(app.DesignCounterAsync, faultRestart, outcomeLosesOrders, 102, 100, 102, []int{2}, no, held), "mismatch"},
		{"async restart, stock below zero", designResult(app.DesignCounterAsync, faultRestart, outcomeLosesOrders, 102, 100, 150, []int{1, 2, 4}, no, held), "mismatch"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, facts := tt.r.designVerdict(); got != tt.want {
				t.Errorf("got %q (%s), want %q", got, facts, tt.want)
			}
		})
	}
}
