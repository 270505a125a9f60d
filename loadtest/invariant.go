package loadtest

import (
	"fmt"
	"slices"
	"strings"
)

// Observed is everything the checker judges: what the attack saw and what
// the API reported before and after. It holds only plain values so tests can
// make one up.
type Observed struct {
	// Before is the product as created or read before the attack. S, the
	// stock there is to sell, is Before.Stock + Before.Sold: orders made
	// before the run are part of it.
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
}

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
func Check(o Observed) []Invariant {
	return []Invariant{
		checkStock(o),
		checkSold(o),
		checkConservation(o),
		checkCreated(o),
		checkDuplicates(o),
		checkLiveness(o),
	}
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
	return Invariant{1, "stock >= 0", true, verdict(o.After.Stock >= 0),
		fmt.Sprintf("stock %d", o.After.Stock)}
}

func checkSold(o Observed) Invariant {
	ok := o.After.Sold == int64(len(o.Orders))
	detail := fmt.Sprintf("sold %d, orders listed %d", o.After.Sold, len(o.Orders))
	return Invariant{2, "sold == orders", true, verdict(ok), detail}
}

func checkConservation(o Observed) Invariant {
	s := o.Before.Stock + o.Before.Sold
	sum := o.After.Stock + o.After.Sold
	detail := fmt.Sprintf("stock %d + sold %d = %d, S = %d", o.After.Stock, o.After.Sold, sum, s)
	switch {
	case o.StockUnknown:
		return Invariant{3, "stock + sold == S", true, Skip,
			"a restock of unknown outcome: S is not known (the linearizability check still judges the stock)"}
	case o.Restocked != nil:
		// A purchase moves one unit from stock to sold; only a restock
		// changes their sum, and its answer is the state it set.
		s = o.Restocked.Stock + o.Restocked.Sold
		detail = fmt.Sprintf("stock %d + sold %d = %d, S = %d from the last of %d restocks (stock %d, sold %d)",
			o.After.Stock, o.After.Sold, sum, s, o.Restocks, o.Restocked.Stock, o.Restocked.Sold)
	}
	switch {
	case sum > s:
		detail += fmt.Sprintf(": oversold by %d", sum-s)
	case sum < s:
		detail += fmt.Sprintf(": %d units lost", s-sum)
	}
	return Invariant{3, "stock + sold == S", true, verdict(sum == s), detail}
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

func checkLiveness(o Observed) Invariant {
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

func firstSorted(s []string) string {
	slices.Sort(s)
	return s[0]
}
