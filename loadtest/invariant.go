package loadtest

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Observed is everything the checker judges: what the attack saw and what
// the API reported before and after. It holds only plain values so tests can
// make one up.
type Observed struct {
	// Before is the product as created or read before the attack. S, the
	// stock there is to sell, is Before.Stock + Before.Reserved +
	// Before.Sold: orders made before the run are part of it.
	Before Product
	// After is the product read after the attack.
	After Product
	// Orders is every order the orders endpoint listed for the product,
	// made by this run or not: the checker counts them itself.
	Orders []Order
	// UserPrefix starts every user id of this run, telling its orders apart.
	UserPrefix string
	// Created is the number of 201 answers, and CreatedByUser the same per
	// user id.
	Created       int
	CreatedByUser map[string]int
	// Unknown counts requests that may or may not have made an order: no
	// answer, or a 5xx other than "busy". The 201/order comparison allows
	// for them instead of calling a client timeout an oversell.
	Unknown int
	// Demand is the number of distinct users who tried to buy.
	Demand int
	// EndedNormally is false when the attack was interrupted or cut by the
	// hard deadline; the liveness check is then skipped.
	EndedNormally bool

	// Restocks counts the restocks mixed into the sale (Config.Mix), and
	// Restocked is the answer of the last one that succeeded: the stock
	// was set then, so S becomes its stock + sold. StockUnknown is true
	// when a restock after it (or, with none succeeded, any) has an unknown
	// outcome, so that S is not known.
	Restocks     int
	Restocked    *Product
	StockUnknown bool

	// Reserving is true when the sale's orders have a payment window: a
	// purchase reserves its unit, and the buyer pays, cancels, or lets
	// the window pass and the service expires the order. Check then
	// judges the reserved count and each order's life too.
	Reserving bool
	// Moves are the payments and cancels of the product's orders that got
	// a definite answer.
	Moves []Move
	// Listed is when Orders were listed, and Lag how long past its window
	// an order may stay pending (the expiry's bound): an order still
	// pending past its window plus Lag at Listed has been forgotten.
	Listed time.Time
	Lag    time.Duration
	// Finished is true when the product's buyers paid for every unit
	// they reserved: every buyer paid on time, or a close-out bought and
	// paid for what came back after the sale. Every unit must then end
	// sold, if demand exceeded the supply.
	Finished bool
}

// Move is a payment or a cancel of an order, as the load test saw it.
type Move struct {
	Kind    OpKind // OpPay or OpCancel
	Product int64
	Order   int64
	Status  int    // 200, or the 409's
	Code    string // the 409's error code
	// Call is when it was sent, and Due its order's expires_at as its
	// purchase's 201 answered it: the service's clock, which the load
	// test shares (one host).
	Call, Due time.Time
}

// ok reports whether the move succeeded.
func (m Move) ok() bool { return m.Status == 200 }

// Status is the result of one invariant.
type Status string

// Statuses. Warn is used only by the liveness check, whose failure is a
// problem worth reporting but not an oversell.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Warn Status = "WARN"
	Skip Status = "SKIP"
)

// Invariant is one check and what it found.
type Invariant struct {
	Number int    // 1..6, as Check's doc numbers them
	Name   string // what must hold
	Safety bool   // a failure means something was sold that should not be
	Status Status
	Detail string // the numbers behind the status
}

// Check judges o against the sale's invariants. It is pure, so every branch
// is tested with made-up observations. Safety invariants (1-5):
//
//  1. stock >= 0
//  2. sold == number of orders
//  3. stock + sold == S (nothing sold twice, nothing lost)
//  4. 201 answers == orders made by this run (within the unknown outcomes)
//  5. no user holds two orders, nor got two 201s, for the product
//
// Liveness (6): when demand exceeded the stock and the run ended normally,
// the stock must be 0; otherwise it is reported as undersold (Warn).
//
// When the orders have a payment window (Observed.Reserving), 1-3, 5 and 6
// read: available (the stock) and reserved >= 0; sold == paid orders and
// reserved == pending orders; available + reserved + sold == S; no user
// holds two live (pending or paid) orders; and every unit sold when demand
// exceeded S and the buyers paid for what they reserved (Finished). Four
// safety invariants of an order's life follow:
//
//  7. each order leaves pending once, for good: no order answered 200 to
//     both a payment and a cancel, none whose 200 move is not the state it
//     ended in, none pending again after it closed
//  8. no paid order expired: no order answered 200 to a payment ended
//     expired
//  9. no payment accepted after its window: no 200 to a payment sent after
//     its order's expires_at, and no paid order closed after it
//  10. nothing pending past its window plus Lag when the orders were
//     listed: a unit forgotten there is lost to the sale
func Check(o Observed) []Invariant {
	out := []Invariant{
		checkStock(o),
		checkSold(o),
		checkConservation(o),
		checkCreated(o),
		checkDuplicates(o),
		checkLiveness(o),
	}
	if o.Reserving {
		life := newOrderLife(o)
		out = append(out, life.once(), life.paidExpired(), life.payLate(), life.forgotten())
	}
	return out
}

// Oversold reports whether any safety invariant failed.
func Oversold(results []Invariant) bool {
	return slices.ContainsFunc(results, func(r Invariant) bool {
		return r.Safety && r.Status == Fail
	})
}

func verdict(ok bool) Status {
	if ok {
		return Pass
	}
	return Fail
}

func checkStock(o Observed) Invariant {
	if o.Reserving {
		return Invariant{1, "available, reserved >= 0", true, verdict(o.After.Stock >= 0 && o.After.Reserved >= 0),
			fmt.Sprintf("available %d, reserved %d", o.After.Stock, o.After.Reserved)}
	}
	return Invariant{1, "stock >= 0", true, verdict(o.After.Stock >= 0),
		fmt.Sprintf("stock %d", o.After.Stock)}
}

func checkSold(o Observed) Invariant {
	if o.Reserving {
		n := countStates(o.Orders)
		ok := o.After.Sold == int64(n[StatePaid]) && o.After.Reserved == int64(n[StatePending])
		detail := fmt.Sprintf("sold %d, paid orders %d; reserved %d, pending orders %d",
			o.After.Sold, n[StatePaid], o.After.Reserved, n[StatePending])
		return Invariant{2, "sold == paid, reserved == pending", true, verdict(ok), detail}
	}
	ok := o.After.Sold == int64(len(o.Orders))
	detail := fmt.Sprintf("sold %d, orders listed %d", o.After.Sold, len(o.Orders))
	return Invariant{2, "sold == orders", true, verdict(ok), detail}
}

// countStates counts orders by state.
func countStates(orders []Order) map[string]int {
	n := map[string]int{}
	for _, ord := range orders {
		n[ord.State]++
	}
	return n
}

// supply is a product's stock, reserved and sold added up.
func supply(p Product) int64 { return p.Stock + p.Reserved + p.Sold }

func checkConservation(o Observed) Invariant {
	name := "stock + sold == S"
	s, sum := supply(o.Before), supply(o.After)
	detail := fmt.Sprintf("stock %d + sold %d = %d, S = %d", o.After.Stock, o.After.Sold, sum, s)
	if o.Reserving {
		name = "available + reserved + sold == S"
		detail = fmt.Sprintf("available %d + reserved %d + sold %d = %d, S = %d", o.After.Stock, o.After.Reserved, o.After.Sold, sum, s)
	}
	switch {
	case o.StockUnknown:
		return Invariant{3, name, true, Skip,
			"a restock of unknown outcome: S is not known (the linearizability check still judges the stock)"}
	case o.Restocked != nil:
		// A purchase moves one unit from stock to sold (or reserved, and
		// a payment, a cancel or an expiry on between them); only a
		// restock changes their sum, and its answer is the state it set.
		s = supply(*o.Restocked)
		detail = fmt.Sprintf("stock %d + sold %d = %d, S = %d from the last of %d restocks (stock %d, sold %d)",
			o.After.Stock, o.After.Sold, sum, s, o.Restocks, o.Restocked.Stock, o.Restocked.Sold)
		if o.Reserving {
			detail = fmt.Sprintf("available %d + reserved %d + sold %d = %d, S = %d from the last of %d restocks (available %d, reserved %d, sold %d)",
				o.After.Stock, o.After.Reserved, o.After.Sold, sum, s, o.Restocks, o.Restocked.Stock, o.Restocked.Reserved, o.Restocked.Sold)
		}
	}
	switch {
	case sum > s:
		detail += fmt.Sprintf(": oversold by %d", sum-s)
	case sum < s:
		detail += fmt.Sprintf(": %d units lost", s-sum)
	}
	return Invariant{3, name, true, verdict(sum == s), detail}
}

func checkCreated(o Observed) Invariant {
	mine := 0
	for _, ord := range o.Orders {
		if o.UserPrefix != "" && strings.HasPrefix(ord.UserID, o.UserPrefix) {
			mine++
		}
	}
	// Every 201 must have its order. An order without a 201 is allowed only
	// for a request whose answer never arrived or was an unexplained 5xx.
	ok := mine >= o.Created && mine <= o.Created+o.Unknown
	detail := fmt.Sprintf("201 answers %d, orders by this run %d", o.Created, mine)
	if o.Unknown > 0 {
		detail += fmt.Sprintf(" (%d requests of unknown outcome allowed for)", o.Unknown)
	}
	return Invariant{4, "201 answers == orders of this run", true, verdict(ok), detail}
}

func checkDuplicates(o Observed) Invariant {
	if o.Reserving {
		return checkLiveDuplicates(o)
	}
	perUser := map[string]int{}
	for _, ord := range o.Orders {
		perUser[ord.UserID]++
	}
	var dupOrders, dup201 []string
	for u, n := range perUser {
		if n > 1 {
			dupOrders = append(dupOrders, u)
		}
	}
	for u, n := range o.CreatedByUser {
		if n > 1 {
			dup201 = append(dup201, u)
		}
	}
	ok := len(dupOrders) == 0 && len(dup201) == 0
	detail := fmt.Sprintf("users with two orders %d, users with two 201s %d", len(dupOrders), len(dup201))
	if !ok {
		detail += ", e.g. " + firstSorted(append(dupOrders, dup201...))
	}
	return Invariant{5, "no user holds two orders", true, verdict(ok), detail}
}

// checkLiveDuplicates is checkDuplicates with a window: a user whose
// order was cancelled or expired may buy again, so two orders and two
// 201s are fine, two live orders are not.
func checkLiveDuplicates(o Observed) Invariant {
	live := map[string]int{}
	for _, ord := range o.Orders {
		if ord.State == StatePending || ord.State == StatePaid {
			live[ord.UserID]++
		}
	}
	var dup []string
	for u, n := range live {
		if n > 1 {
			dup = append(dup, u)
		}
	}
	detail := fmt.Sprintf("users with two live orders %d", len(dup))
	if len(dup) > 0 {
		detail += ", e.g. " + firstSorted(dup)
	}
	return Invariant{5, "no user holds two live orders", true, verdict(len(dup) == 0), detail}
}

func checkLiveness(o Observed) Invariant {
	if o.Reserving {
		return checkSoldAll(o)
	}
	inv := Invariant{Number: 6, Name: "sold out when demand exceeded stock", Safety: false}
	switch {
	case !o.EndedNormally:
		inv.Status, inv.Detail = Skip, "the run did not end normally"
	case o.Restocks > 0:
		inv.Status, inv.Detail = Skip, fmt.Sprintf("%d restocks changed the stock during the sale", o.Restocks)
	case int64(o.Demand) <= o.Before.Stock:
		inv.Status, inv.Detail = Skip, fmt.Sprintf("demand %d did not exceed stock %d", o.Demand, o.Before.Stock)
	case o.After.Stock <= 0:
		inv.Status, inv.Detail = Pass, fmt.Sprintf("demand %d > stock %d, stock left %d", o.Demand, o.Before.Stock, o.After.Stock)
	default:
		inv.Status, inv.Detail = Warn, fmt.Sprintf("undersold: demand %d > stock %d, yet %d left", o.Demand, o.Before.Stock, o.After.Stock)
	}
	return inv
}

// checkSoldAll is checkLiveness with a window: the stock can be 0 while
// units are reserved, and units that came back at the end are on sale
// again, so the question is whether every unit ended sold, asked only
// when the buyers paid for what they reserved.
func checkSoldAll(o Observed) Invariant {
	inv := Invariant{Number: 6, Name: "all sold when demand exceeded S", Safety: false}
	s := supply(o.Before)
	switch {
	case !o.EndedNormally:
		inv.Status, inv.Detail = Skip, "the run did not end normally"
	case o.Restocks > 0:
		inv.Status, inv.Detail = Skip, fmt.Sprintf("%d restocks changed the stock during the sale", o.Restocks)
	case int64(o.Demand) <= s:
		inv.Status, inv.Detail = Skip, fmt.Sprintf("demand %d did not exceed S %d", o.Demand, s)
	case !o.Finished:
		inv.Status, inv.Detail = Skip, "not every buyer paid, and nobody bought what came back after the sale"
	case o.After.Sold == s:
		inv.Status, inv.Detail = Pass, fmt.Sprintf("demand %d > S %d, sold %d", o.Demand, s, o.After.Sold)
	default:
		inv.Status, inv.Detail = Warn, fmt.Sprintf("undersold: demand %d > S %d, yet sold %d (available %d, reserved %d)",
			o.Demand, s, o.After.Sold, o.After.Stock, o.After.Reserved)
	}
	return inv
}

func firstSorted(s []string) string {
	slices.Sort(s)
	return s[0]
}
