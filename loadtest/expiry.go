package loadtest

import (
	"cmp"
	"slices"
	"time"
)

// closedSlack is added to an expiry's closed_at to bound when it took
// effect: the API writes closed_at in microseconds, truncated, and the
// time it stands for may be up to a microsecond later. A millisecond is
// ample.
const closedSlack = time.Millisecond

// expiries rebuilds the service's expiry rounds from the orders listed
// after the sale, as operations of the history (OpExpire), one per round
// and product: the orders of one product expired with the same closed_at
// were expired by one round, whose transaction moved them and their units
// at once (a round records closed_at for all of them after its commit).
//
// A round's interval runs from the latest expires_at of its orders (a
// replica expires only orders whose window has ended by its clock, which
// the load test shares, one host, so it cannot have taken effect before)
// to its closed_at (recorded once the transaction had committed, so it
// took effect by then), plus closedSlack for the truncation. An expired
// order without closed_at (its replica stopped between the commit and the
// record) is a round of its own, which took effect by the time the orders
// were listed (listed, on the history's clock, from start). Several
// orders of one round apart are more freedom for the check, never less.
func expiries(orders []Order, start time.Time, listed time.Duration) []Op {
	type round struct {
		product int64
		closed  int64 // UnixMicro of closed_at; 0: none
		id      int64 // the order, when closed is 0
	}
	byRound := map[round]*Op{}
	var out []*Op
	for _, o := range orders {
		if o.State != StateExpired {
			continue
		}
		r := round{product: o.ProductID}
		if o.ClosedAt.IsZero() {
			r.id = o.ID
		} else {
			r.closed = o.ClosedAt.UnixMicro()
		}
		op := byRound[r]
		if op == nil {
			op = &Op{Kind: OpExpire, Product: o.ProductID, Result: ResultOK, Return: listed}
			if r.closed != 0 {
				op.Return = o.ClosedAt.Sub(start) + closedSlack
			}
			byRound[r] = op
			out = append(out, op)
		}
		op.Orders = append(op.Orders, o.ID)
		if !o.ExpiresAt.IsZero() {
			op.Call = max(op.Call, o.ExpiresAt.Sub(start))
		}
	}
	ops := make([]Op, len(out))
	for i, op := range out {
		slices.Sort(op.Orders)
		ops[i] = *op
	}
	slices.SortStableFunc(ops, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Product, b.Product), cmp.Compare(a.Call, b.Call), cmp.Compare(a.Return, b.Return))
	})
	return ops
}
