package loadtest

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The invariants of an order's life (7-10 of Check), over the orders
// listed after the sale and the payments and cancels the load test saw.

// orderLife is what the invariants of an order's life read: the orders by
// product and id, and the definite payments and cancels of each.
type orderLife struct {
	o      Observed
	orders map[orderID]Order
	moves  map[orderID][]Move // by order, as sent
	ids    []orderID          // orders with moves, sorted
}

// orderID names an order: its product and its id.
type orderID struct{ product, id int64 }

func (k orderID) String() string { return strconv.FormatInt(k.id, 10) }

func newOrderLife(o Observed) orderLife {
	l := orderLife{o: o, orders: make(map[orderID]Order, len(o.Orders)), moves: map[orderID][]Move{}}
	for _, ord := range o.Orders {
		l.orders[orderID{ord.ProductID, ord.ID}] = ord
	}
	for _, m := range o.Moves {
		k := orderID{m.Product, m.Order}
		if _, ok := l.moves[k]; !ok {
			l.ids = append(l.ids, k)
		}
		l.moves[k] = append(l.moves[k], m)
	}
	slices.SortFunc(l.ids, func(a, b orderID) int { return cmp.Or(cmp.Compare(a.product, b.product), cmp.Compare(a.id, b.id)) })
	return l
}

// stateOf is where an accepted move leaves an order.
func stateOf(kind OpKind) string {
	if kind == OpPay {
		return StatePaid
	}
	return StateCancelled
}

// problems keeps the first few problems found, and counts them all.
type problems struct {
	n     int
	first []string
}

func (p *problems) add(format string, args ...any) {
	p.n++
	if len(p.first) < 3 {
		p.first = append(p.first, fmt.Sprintf(format, args...))
	}
}

// detail is the invariant's detail: what it looked at, then the problems.
func (p problems) detail(looked string) string {
	if p.n == 0 {
		return looked
	}
	s := fmt.Sprintf("%s; %d wrong: %s", looked, p.n, strings.Join(p.first, "; "))
	if p.n > len(p.first) {
		s += "; ..."
	}
	return s
}

// once is invariant 7: each order leaves pending once, for good.
func (l orderLife) once() Invariant {
	var bad problems
	n := countStates(l.o.Orders)
	for _, ord := range l.o.Orders {
		switch ord.State {
		case StatePending:
			if !ord.ClosedAt.IsZero() {
				bad.add("order %d is pending again after it closed at %s", ord.ID, clock(ord.ClosedAt))
			}
		case StatePaid, StateCancelled, StateExpired:
		default:
			bad.add("order %d is in no state of an order's life (%q)", ord.ID, ord.State)
		}
	}
	accepted := 0
	for _, id := range l.ids {
		var ok []Move
		for _, m := range l.moves[id] {
			if m.ok() {
				ok = append(ok, m)
			}
		}
		accepted += len(ok)
		ord, listed := l.orders[id]
		switch {
		case len(ok) > 1:
			bad.add("order %v was answered 200 to %d moves (%s)", id, len(ok), kinds(ok))
		case len(ok) == 1 && !listed:
			bad.add("order %v was answered 200 to a %s, and is not listed", id, ok[0].Kind)
		case len(ok) == 1 && ord.State != stateOf(ok[0].Kind) && !(ok[0].Kind == OpPay && ord.State == StateExpired):
			// A paid order that expired is invariant 8's.
			bad.add("order %v was answered 200 to a %s, and ended %s", id, ok[0].Kind, ord.State)
		}
	}
	looked := fmt.Sprintf("orders %d: %d pending, %d paid, %d cancelled, %d expired; payments and cancels answered 200: %d",
		len(l.o.Orders), n[StatePending], n[StatePaid], n[StateCancelled], n[StateExpired], accepted)
	return Invariant{7, "each order leaves pending once", true, verdict(bad.n == 0), bad.detail(looked)}
}

// kinds names the moves: "pay, cancel".
func kinds(ms []Move) string {
	var s []string
	for _, m := range ms {
		s = append(s, string(m.Kind))
	}
	return strings.Join(s, ", ")
}

// paidExpired is invariant 8: no order answered 200 to a payment ended
// expired.
func (l orderLife) paidExpired() Invariant {
	var bad problems
	paid := 0
	for _, id := range l.ids {
		for _, m := range l.moves[id] {
			if m.Kind != OpPay || !m.ok() {
				continue
			}
			paid++
			if ord := l.orders[id]; ord.State == StateExpired {
				bad.add("order %v was answered 200 to its payment at %s, and ended expired", id, clock(m.Call))
			}
		}
	}
	return Invariant{8, "no paid order expired", true, verdict(bad.n == 0),
		bad.detail(fmt.Sprintf("payments answered 200: %d", paid))}
}

// payLate is invariant 9: no payment accepted after its window, by the
// time it was sent (the load test's clock) or by the time the service
// recorded it paid (its own). The API writes both edges in microseconds,
// truncated, so a payment must be later than dueSlack to be late.
func (l orderLife) payLate() Invariant {
	var bad problems
	paid, refused := 0, 0
	for _, id := range l.ids {
		for _, m := range l.moves[id] {
			switch {
			case m.Kind != OpPay:
			case !m.ok() && m.Code == codeOrderExpired:
				refused++
			case m.ok():
				paid++
				if !m.Due.IsZero() && m.Call.After(m.Due.Add(dueSlack)) {
					bad.add("order %v: a payment sent %v after its window ended was answered 200", id, round(m.Call.Sub(m.Due)))
				}
			}
		}
	}
	for _, ord := range l.o.Orders {
		if ord.State == StatePaid && !ord.ExpiresAt.IsZero() && !ord.ClosedAt.IsZero() && ord.ClosedAt.After(ord.ExpiresAt) {
			bad.add("order %d was paid at %s, %v after its window ended", ord.ID, clock(ord.ClosedAt), round(ord.ClosedAt.Sub(ord.ExpiresAt)))
		}
	}
	looked := fmt.Sprintf("payments answered 200: %d, refused as expired: %d", paid, refused)
	return Invariant{9, "no payment accepted after its window", true, verdict(bad.n == 0), bad.detail(looked)}
}

// forgotten is invariant 10: nothing pending past its window plus the
// expiry's lag when the orders were listed.
func (l orderLife) forgotten() Invariant {
	var late []Order
	pending := 0
	for _, ord := range l.o.Orders {
		if ord.State != StatePending {
			continue
		}
		pending++
		if !ord.ExpiresAt.IsZero() && l.o.Listed.After(ord.ExpiresAt.Add(l.o.Lag)) {
			late = append(late, ord)
		}
	}
	slices.SortFunc(late, func(a, b Order) int { return cmp.Compare(a.ExpiresAt.UnixNano(), b.ExpiresAt.UnixNano()) })
	var bad problems
	for _, ord := range late {
		bad.add("order %d is pending %v past its window", ord.ID, round(l.o.Listed.Sub(ord.ExpiresAt)))
	}
	looked := fmt.Sprintf("pending when listed: %d, allowed %v past the window", pending, l.o.Lag)
	return Invariant{10, "nothing pending past window + lag", true, verdict(bad.n == 0), bad.detail(looked)}
}

// clock is a time of day, to the millisecond, as in a log.
func clock(t time.Time) string { return t.Format("15:04:05.000") }
