package loadtest

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of one sale: the verdict, the invariants with their
// numbers, and what the attack measured. It is plain data so callers (the
// demo's table, CI) can pick fields; WriteText prints it for a person.
type Report struct {
	// Targets are the base URLs attacked, round-robin, Shape the load sent
	// (Config.Shape) and Mix the reads and restocks mixed into it.
	Targets []string
	Shape   string
	Mix     Mix
	// ProductID is the product sold, 0 when the sale sold several;
	// UserPrefix starts every user id of this run.
	ProductID  int64
	UserPrefix string
	// Skew is how the buyers spread over several products (Config.Skew),
	// "" for one.
	Skew string
	// Before and After are the product before and after the attack, or
	// the products' stock and sold added up; S, the stock to sell, is
	// Before.Stock + Before.Sold. After.Stock is the stock left and
	// After.Sold the orders the products have.
	Before, After Product
	// RunOrders counts the orders whose user belongs to this run.
	RunOrders int
	// Products is every product of the sale, in skew order (the hottest
	// first), each with its own checks.
	Products []ProductReport

	// Requests is the number of purchase requests answered or failed,
	// Repeats how many of them reused an earlier buyer, Created how many got
	// 201, and Unknown how many may or may not have made an order.
	Requests, Repeats, Created, Unknown int
	// ByStatus counts answers per HTTP status (0: no answer). ByOutcome
	// counts them per status and error code ("201", "409 sold_out",
	// "503 busy", "error"), RepeatsByOutcome the same for repeat buyers
	// only, and TransportErrors per message (at most 10 distinct ones).
	ByStatus         map[int]int
	ByOutcome        map[string]int
	RepeatsByOutcome map[string]int
	TransportErrors  map[string]int

	// Elapsed runs from the start of the attack to its last answer.
	Elapsed time.Duration
	// RequestRate is requests per second over Elapsed. PurchaseRate is 201s
	// per second over the selling window (start to the last 201), which is
	// what a sale that sells out in a fraction of the run really achieved.
	RequestRate, PurchaseRate float64
	// LastPurchase is when the last 201 arrived, and SoldOutAt when the
	// first sold_out after it did (zero if none): the time to sell out.
	// With several products, SoldOutAt is when the last of those sold was
	// seen sold out (zero unless every one was).
	LastPurchase, SoldOutAt time.Duration
	// Latency covers all requests, PurchaseLatency the 201s only.
	Latency, PurchaseLatency Latency
	// Timeline is the attack step by step, and Samples the product as the
	// server answered during it: the charts of the HTML report.
	Timeline Timeline
	Samples  []Sample

	// Invariants holds the result of Check. Oversold is true when any safety
	// invariant failed, Undersold when the liveness check warned.
	Invariants []Invariant
	Oversold   bool
	Undersold  bool
	// ExpectOversell is copied from the Config: it inverts OK.
	ExpectOversell bool
	// Stopped says why the attack ended early ("interrupted", "hard
	// deadline"); empty when it ran its course.
	Stopped string

	// Reads and Restocks count the requests mixed into the sale
	// (Config.Mix); Requests counts only the purchases.
	Reads, Restocks int
	// Linearizability is the check of the run's history: yes, NO (the
	// violation found) or unknown; LinNotChecked when it was skipped.
	Linearizability Linearizability
	// History is the file the history was written to, if any.
	History string

	// Reservations is what the orders came to when they had a payment
	// window: the buyers' moves, the orders by state, the expiry's lag,
	// and the orders over time; nil without a window.
	Reservations *Reservations
}

// OK is the verdict: no oversell and a linearizable history (or the check
// skipped), or, with ExpectOversell, an oversell or a violation caught. An
// unknown linearizability verdict is not a pass.
func (r Report) OK() bool {
	if r.ExpectOversell {
		return r.violated()
	}
	return !r.violated() && r.Linearizability.Verdict != LinUnknown
}

// violated reports whether the run caught a fault: an oversell, or a
// history that is not linearizable.
func (r Report) violated() bool { return r.Oversold || r.Linearizability.Verdict == LinNo }

// Verdict is the one line a person reads first.
func (r Report) Verdict() string {
	lin := r.Linearizability.Verdict
	life := r.lifeOnly()
	switch {
	case r.ExpectOversell && life != "":
		return "PASS: a safety invariant of the orders' life failed, as expected for this mode: " + life
	case r.ExpectOversell && r.Oversold:
		return "PASS: oversell detected, as expected for this mode"
	case r.ExpectOversell && lin == LinNo:
		return "PASS: not linearizable, as expected for this mode (no oversell seen in the counts)"
	case r.ExpectOversell:
		return "FAIL: an oversell was expected and none was detected"
	case life != "":
		return "FAIL: A SAFETY INVARIANT OF THE ORDERS' LIFE FAILED: " + life
	case r.Oversold:
		return "FAIL: OVERSOLD, a safety invariant failed"
	case lin == LinNo:
		return "FAIL: NOT LINEARIZABLE, the history has an anomaly the counts do not show"
	case lin == LinUnknown:
		return "FAIL: every safety invariant held, but linearizability is unknown: not a pass"
	case lin == LinYes:
		return "PASS: every safety invariant held, nothing oversold, the history is linearizable"
	default:
		return "PASS: every safety invariant held, nothing oversold"
	}
}

// lifeOnly names the first failed safety invariant when every one that
// failed is of an order's life (7-10): the counts held, and "oversold"
// would say the wrong thing. "" otherwise.
func (r Report) lifeOnly() string {
	first := ""
	for _, inv := range r.Invariants {
		switch {
		case !inv.Safety || inv.Status != Fail:
		case inv.Number < 7:
			return ""
		case first == "":
			first = fmt.Sprintf("(%d) %s", inv.Number, inv.Name)
		}
	}
	return first
}

// WriteText writes the report for a person.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	s := supply(r.Before)
	fmt.Fprintf(&b, "\nSale of %s (S = %d) on %s", r.SaleName(), s, strings.Join(r.Targets, ", "))
	if r.Stopped != "" {
		fmt.Fprintf(&b, ", stopped early: %s", r.Stopped)
	}
	fmt.Fprintf(&b, "\n  load: %s\n", r.Shape)
	if r.Reservations != nil {
		fmt.Fprintf(&b, "  sold %d, reserved %d, available %d; orders %d (by this run %d)\n", r.After.Sold, r.After.Reserved, r.After.Stock, r.Reservations.Total(), r.RunOrders)
	} else {
		fmt.Fprintf(&b, "  orders %d (by this run %d), stock left %d\n", r.After.Sold, r.RunOrders, r.After.Stock)
	}
	if len(r.Products) > 1 {
		writeHottest(&b, r)
	}

	b.WriteString("\nInvariants\n")
	for _, inv := range r.Invariants {
		kind := "safety"
		if !inv.Safety {
			kind = "liveness"
		}
		// Two-digit numbers take one column of the name's.
		width := 37 - len(strconv.Itoa(inv.Number))
		fmt.Fprintf(&b, "  %-4s (%d) %-*s %-8s %s\n", inv.Status, inv.Number, width, inv.Name, kind, inv.Detail)
	}
	writeLinearizability(&b, r)
	if r.Reservations != nil {
		r.Reservations.writeText(&b)
	}

	fmt.Fprintf(&b, "\nOutcomes of %d requests (%d repeat buyers)", r.Requests, r.Repeats)
	if r.Reads > 0 || r.Restocks > 0 || r.Mix.restocks() {
		fmt.Fprintf(&b, ", and %d reads and %d restocks mixed in", r.Reads, r.Restocks)
	}
	b.WriteString("\n")
	if r.Mix.restocks() && r.Restocks == 0 {
		// Said, because the check then judged a sale without the restocks
		// asked for.
		fmt.Fprintf(&b, "  no restock ran (%s): the sale was over before the first was due", r.Mix)
		if r.Mix.Restocks > 0 {
			b.WriteString("; a share of the requests (restocks=2%) paces them by count")
		}
		b.WriteString("\n")
	}
	for _, k := range sortedKeys(r.ByOutcome) {
		fmt.Fprintf(&b, "  %-24s %8d", k, r.ByOutcome[k])
		if n := r.RepeatsByOutcome[k]; n > 0 {
			fmt.Fprintf(&b, "   (%d repeat)", n)
		}
		b.WriteString("\n")
	}
	for _, msg := range sortedKeys(r.TransportErrors) {
		fmt.Fprintf(&b, "  error %q x%d\n", msg, r.TransportErrors[msg])
	}
	if r.Unknown > 0 {
		fmt.Fprintf(&b, "  %d requests of unknown outcome (no answer, or a 5xx other than busy)\n", r.Unknown)
	}

	b.WriteString("\nThroughput\n")
	fmt.Fprintf(&b, "  %.1f requests/s over %v, %.1f purchases/s while selling\n",
		r.RequestRate, round(r.Elapsed), r.PurchaseRate)
	switch {
	case r.SoldOutAt > 0:
		fmt.Fprintf(&b, "  sold out at %v (last 201 at %v)\n", round(r.SoldOutAt), round(r.LastPurchase))
	case r.Created > 0:
		fmt.Fprintf(&b, "  not seen sold out (last 201 at %v)\n", round(r.LastPurchase))
	default:
		b.WriteString("  no purchase succeeded\n")
	}

	b.WriteString("\nLatency        count      p50      p90      p99      max\n")
	writeLatency(&b, "all", r.Latency)
	writeLatency(&b, "201 only", r.PurchaseLatency)

	fmt.Fprintf(&b, "\n%s\n", r.Verdict())
	_, err := io.WriteString(w, b.String())
	return err
}

// HottestShown is how many products the reports list one by one: the
// most demanded. The others are summed in one line.
const HottestShown = 10

// SaleName names what was sold: "product 7", or "2000 products (skew
// zipf:1.1)".
func (r Report) SaleName() string {
	if len(r.Products) <= 1 {
		return fmt.Sprintf("product %d", r.ProductID)
	}
	return fmt.Sprintf("%d products (skew %s)", len(r.Products), r.Skew)
}

// ProductGroup is products added up: a report's line for the products
// beyond the hottest.
type ProductGroup struct {
	// Count is how many products; Oversold and Undersold how many of them
	// were.
	Count, Oversold, Undersold int
	// Before and After are their stock and sold added up.
	Before, After Product
	// Demand, Requests, Created and Orders are added up as well.
	Demand, Requests, Created, Orders int
}

// S is the group's stock to sell.
func (g ProductGroup) S() int64 { return supply(g.Before) }

// Hottest is the HottestShown most demanded products, and the others
// added up: the lines a report shows of a sale of many products.
func (r Report) Hottest() (top []ProductReport, rest ProductGroup) {
	top = hottest(r.Products, HottestShown)
	shown := map[int64]bool{}
	for _, p := range top {
		shown[p.ID] = true
	}
	for _, p := range r.Products {
		if shown[p.ID] {
			continue
		}
		rest.Count++
		rest.Before = addProducts(rest.Before, p.Before)
		rest.After = addProducts(rest.After, p.After)
		rest.Demand += p.Demand
		rest.Requests += p.Requests
		rest.Created += p.Created
		rest.Orders += p.Orders
		if p.Oversold {
			rest.Oversold++
		}
		if p.Undersold {
			rest.Undersold++
		}
	}
	return top, rest
}

// writeHottest writes the hottest products of a sale of several, and the
// others in one line.
func writeHottest(b *strings.Builder, r Report) {
	top, rest := r.Hottest()
	fmt.Fprintf(b, "\nHottest products (of %d)\n  %-9s %7s %7s %7s %7s %6s %11s %9s  %s\n", len(r.Products),
		"product", "demand", "S", "sold", "left", "201s", "sold out at", "201 p99", "checks")
	for _, p := range top {
		soldOut := "-"
		if p.SoldOutAt > 0 {
			soldOut = round(p.SoldOutAt).String()
		}
		fmt.Fprintf(b, "  %-9d %7d %7d %7d %7d %6d %11s %9v  %s\n", p.ID, p.Demand, p.S(),
			p.After.Sold, p.After.Stock, p.Created, soldOut, round(p.PurchaseLatency.P99), checksText(p))
	}
	if rest.Count > 0 {
		fmt.Fprintf(b, "  %-9s %7d %7d %7d %7d %6d %11s %9s  %s\n", fmt.Sprintf("%d more", rest.Count), rest.Demand,
			rest.S(), rest.After.Sold, rest.After.Stock, rest.Created, "", "", rest.checksText())
	}
}

// checksText is a product's line's verdict: "ok", "OVERSOLD", "undersold".
func checksText(p ProductReport) string {
	switch {
	case p.Oversold:
		return "OVERSOLD"
	case p.Undersold:
		return "undersold"
	}
	return "ok"
}

// checksText is the group's line's verdict: "ok", or how many products
// oversold and were undersold.
func (g ProductGroup) checksText() string {
	var parts []string
	if g.Oversold > 0 {
		parts = append(parts, fmt.Sprintf("%d OVERSOLD", g.Oversold))
	}
	if g.Undersold > 0 {
		parts = append(parts, fmt.Sprintf("%d undersold", g.Undersold))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, ", ")
}

// writeLinearizability writes the check's line under the invariants, and
// where the history and the visualization went.
func writeLinearizability(b *strings.Builder, r Report) {
	fmt.Fprintf(b, "\n  %s\n", r.Linearizability.Line())
	if r.History != "" {
		fmt.Fprintf(b, "  history: %s\n", r.History)
	}
	if v := r.Linearizability.Visualization; v != "" {
		fmt.Fprintf(b, "  porcupine's visualization of product %d: %s\n", r.Linearizability.Product, v)
	}
}

func writeLatency(b *strings.Builder, name string, l Latency) {
	fmt.Fprintf(b, "  %-10s %7d %8v %8v %8v %8v\n", name, l.Count, round(l.P50), round(l.P90), round(l.P99), round(l.Max))
}

// round keeps three significant figures or so, enough to read.
func round(d time.Duration) time.Duration {
	for _, unit := range []time.Duration{time.Second, time.Millisecond, time.Microsecond} {
		if d >= unit {
			return d.Round(unit / 100)
		}
	}
	return d
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
