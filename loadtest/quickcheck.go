package loadtest

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
)

// quickAnomaly looks for the anomalies that show without a search, in one
// pass over a product's history: conditions every linearizable history
// meets, so that a failure is a violation as surely as porcupine's, found
// in microseconds where a search among thousands of concurrent purchases
// could take longer than the check may. It returns "" when it finds none;
// the search then decides.
//
//   - A restock whose answer is not the stock it set.
//   - An expiry that took effect before the window of one of its orders
//     ended: closed before it was due.
//   - A user with two 201s for the product, when orders have no window
//     (with one, an order cancelled or expired lets its buyer buy again).
//   - A read whose stock + reserved + sold is not the sum the last restock
//     before it left (or the created stock, when none can precede it). A
//     purchase moves one unit from stock to reserved or sold, a payment
//     from reserved to sold, a cancel or an expiry from reserved back to
//     the stock; only a restock changes the sum: a lost update breaks it.
//   - With no restock and no window at all, more 201s than the stock
//     there was.
func (p *linProduct) quickAnomaly() string {
	if p.first < 0 {
		return ""
	}
	init := p.ops[p.first]
	s0 := deref(init.Stock) + deref(init.Reserved) + deref(init.Sold)
	start := "starting from " + init.state() + ", "

	var restocks, created []int
	ambiguousRestock := false
	byUser := map[string]int{}
	for i, op := range p.ops {
		switch {
		case op.Kind == OpRestock && op.Result == ResultAmbiguous:
			ambiguousRestock = true
		case op.Kind == OpRestock:
			restocks = append(restocks, i)
			if deref(op.Stock) != deref(op.Set) {
				return start + "a restock answered a state it did not set: " + op.describe()
			}
		case op.Kind == OpExpire && op.Return < op.Call:
			return start + p.closedBeforeDue(i)
		case op.Kind == OpPurchase && op.Result == ResultOK && op.Status == http.StatusCreated:
			created = append(created, i)
			if j, ok := byUser[op.User]; ok && !p.idx.reserve {
				return start + "one user got two 201s: " + p.ops[j].describe() + "; " + op.describe()
			}
			byUser[op.User] = i
		}
	}

	if !ambiguousRestock {
		if r, why := p.badSum(s0, restocks); r >= 0 {
			return start + why + ": " + p.ops[r].describe()
		}
	}
	if len(restocks) == 0 && !ambiguousRestock && !p.idx.reserve && int64(len(created)) > s0 {
		slices.SortFunc(created, func(a, b int) int { return cmp.Compare(p.ops[a].Return, p.ops[b].Return) })
		return fmt.Sprintf("%s%d purchases answered 201 for a stock of %d that no restock raised; the first %s, the one beyond the stock %s",
			start, len(created), s0, p.ops[created[0]].describe(), p.ops[created[s0]].describe())
	}
	return ""
}

// badSum returns the first read (by return) whose stock + sold no
// restock that could precede it explains, or -1. restocks are the
// definite restocks, whose answers say the sum they left: the stock set
// plus the sold count at that moment.
func (p *linProduct) badSum(s0 int64, restocks []int) (int, string) {
	var reads []int
	for i, op := range p.ops {
		if op.Kind == OpRead && op.Result == ResultOK && i != p.first {
			reads = append(reads, i)
		}
	}
	slices.SortFunc(reads, func(a, b int) int { return cmp.Compare(p.ops[a].Return, p.ops[b].Return) })
	for _, i := range reads {
		r := p.ops[i]
		sum := deref(r.Stock) + deref(r.Reserved) + deref(r.Sold)
		// The sums the state can have at the read: that of any restock
		// that may come last before it (one that started before the read
		// ended, with no other restock surely between them), or the
		// created sum if no restock surely precedes the read.
		ok := true
		for _, k := range restocks {
			if p.ops[k].Return < r.Call {
				ok = false // some restock surely precedes the read
				break
			}
		}
		if ok && sum == s0 {
			continue
		}
		explained, before := false, 0
		for _, k := range restocks {
			rk := p.ops[k]
			if rk.Call > r.Return {
				continue
			}
			before++
			later := slices.ContainsFunc(restocks, func(m int) bool {
				return p.ops[m].Call > rk.Return && p.ops[m].Return < r.Call
			})
			if !later && deref(rk.Set)+deref(rk.Reserved)+deref(rk.Sold) == sum {
				explained = true
				break
			}
		}
		if !explained {
			what, moves := "stock + sold", "a purchase moves one unit from stock to sold"
			if p.idx.reserve {
				what, moves = "stock + reserved + sold", "a purchase, a payment, a cancel and an expiry move units between them"
			}
			why := fmt.Sprintf("a read found %s = %d, which no restock before it left, "+
				"and only a restock changes the sum (%s)", what, sum, moves)
			if before == 0 {
				why = fmt.Sprintf("a read found %s = %d, not %d, with no restock before it "+
					"(%s, so the sum stays)", what, sum, s0, moves)
			}
			return i, why
		}
	}
	return -1, ""
}

// closedBeforeDue says why expiry i closed before its window ended: it
// took effect early, or one of its orders had closed before, answered
// 200 to a payment or a cancel whose closed_at it kept, and expired all
// the same.
func (p *linProduct) closedBeforeDue(i int) string {
	exp := p.ops[i]
	for _, op := range p.ops {
		if (op.Kind == OpPay || op.Kind == OpCancel) && op.Result == ResultOK && op.Status == http.StatusOK && slices.Contains(exp.Orders, op.Order) {
			return fmt.Sprintf("an order left pending twice: %s, and it expired as well, keeping the closed_at of the first move: %s",
				op.describe(), exp.describe())
		}
	}
	return "an order expired before its window ended: " + exp.describe()
}
