package loadtest

import (
	"fmt"
	"html/template"
	"maps"
	"slices"
	"strings"
	"time"
)

// Reservations is what the orders of a sale with a payment window came
// to: the buyers' moves, the orders by state, the expiry's lag, and
// reserved, paid, cancelled and expired over time.
type Reservations struct {
	// Life is what the buyers were to do (Config.Life), and Window the
	// payment window the service answered (the longest seen).
	Life   Life
	Window time.Duration
	// Orders counts the orders listed after the sale by state.
	Orders map[string]int
	// Moves counts the buyers' moves by what they got: "pay 200", "late
	// pay 409 order_expired", "cancel 200", "close-out pay 200", and
	// "lapse" for those who let the window pass.
	Moves map[string]int
	// ExpiryLag is how long after its window ended each expired order was
	// recorded closed (closed_at - expires_at): the expiry's lag.
	ExpiryLag Latency
	// AfterSale is what the wait for the expiry after the sale found, and
	// CloseOut how many units the close-out bought, over how many
	// products.
	AfterSale                string
	CloseOut, CloseOutOfMany int
	// Step and Steps are the orders over time, from the start of the
	// attack to the last order closed.
	Step  time.Duration
	Steps []LifeStep
}

// LifeStep is the orders at the end of one step: reserved then, and
// paid, cancelled and expired by then (each counted at its closed_at; an
// expired order without one, at its expires_at).
type LifeStep struct {
	At                                 time.Duration
	Reserved, Paid, Cancelled, Expired int
}

// report sums up the orders listed after the sale (attack began at
// start), or nil when they had no window.
func (l *lives) report(orders []Order, start time.Time) *Reservations {
	var windowed []Order
	for _, o := range orders {
		if !o.ExpiresAt.IsZero() {
			windowed = append(windowed, o)
		}
	}
	if len(windowed) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &Reservations{Life: l.cfg, Window: l.window, Orders: countStates(windowed), Moves: maps.Clone(l.answers), AfterSale: l.waited}
	for _, co := range l.closing {
		r.CloseOut += co.paid
		r.CloseOutOfMany++
	}
	var lags []time.Duration
	var end time.Duration
	for _, o := range windowed {
		if o.State == StateExpired && !o.ClosedAt.IsZero() {
			lags = append(lags, o.ClosedAt.Sub(o.ExpiresAt))
		}
		end = max(end, o.ClosedAt.Sub(start), o.CreatedAt.Sub(start))
	}
	r.ExpiryLag = summarize(lags)
	r.Step, r.Steps = lifeTimeline(windowed, start, end)
	return r
}

// lifeTimeline counts the orders over time, in at most MaxSteps steps
// from start to end.
func lifeTimeline(orders []Order, start time.Time, end time.Duration) (time.Duration, []LifeStep) {
	step := stepWidth(end)
	n := int(end/step) + 1
	at := func(t time.Time) int { return min(max(int(t.Sub(start)/step), 0), n-1) }
	// Changes per step, summed up after.
	reserved, paid, cancelled, expired := make([]int, n+1), make([]int, n), make([]int, n), make([]int, n)
	for _, o := range orders {
		reserved[at(o.CreatedAt)]++
		closed := o.ClosedAt
		if closed.IsZero() && o.State == StateExpired {
			closed = o.ExpiresAt
		}
		if closed.IsZero() {
			continue
		}
		i := at(closed)
		reserved[i]--
		switch o.State {
		case StatePaid:
			paid[i]++
		case StateCancelled:
			cancelled[i]++
		case StateExpired:
			expired[i]++
		}
	}
	steps := make([]LifeStep, n)
	var cur LifeStep
	for i := range steps {
		cur.At = time.Duration(i+1) * step
		cur.Reserved += reserved[i]
		cur.Paid += paid[i]
		cur.Cancelled += cancelled[i]
		cur.Expired += expired[i]
		steps[i] = cur
	}
	return step, steps
}

// lifeRows is how many rows of the timeline the text report shows.
const lifeRows = 12

// writeReservations writes the reservations' section of the text report.
func (r *Reservations) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "\nReservations (window %v; buyers %s)\n", round(r.Window), r.Life)
	fmt.Fprintf(b, "  orders %d: paid %d, cancelled %d, expired %d, pending %d\n", r.Total(),
		r.Orders[StatePaid], r.Orders[StateCancelled], r.Orders[StateExpired], r.Orders[StatePending])
	var moves []string
	for _, k := range sortedKeys(r.Moves) {
		moves = append(moves, fmt.Sprintf("%s x%d", k, r.Moves[k]))
	}
	if len(moves) > 0 {
		fmt.Fprintf(b, "  buyers' moves: %s\n", strings.Join(moves, ", "))
	}
	fmt.Fprintf(b, "  %s\n", r.LagLine())
	if r.AfterSale != "" {
		fmt.Fprintf(b, "  after the sale: %s\n", r.AfterSale)
	}
	if r.CloseOutOfMany > 0 {
		fmt.Fprintf(b, "  close-out: %d unit(s) bought and paid over %d product(s)\n", r.CloseOut, r.CloseOutOfMany)
	}
	fmt.Fprintf(b, "  %-10s %9s %9s %9s %9s\n", "by", "reserved", "paid", "cancelled", "expired")
	every := (len(r.Steps) + lifeRows - 1) / lifeRows
	for i, st := range r.Steps {
		if (i+1)%every != 0 && i != len(r.Steps)-1 {
			continue
		}
		fmt.Fprintf(b, "  %-10v %9d %9d %9d %9d\n", round(st.At), st.Reserved, st.Paid, st.Cancelled, st.Expired)
	}
}

// Total is how many orders had a window.
func (r *Reservations) Total() int {
	n := 0
	for _, k := range r.Orders {
		n += k
	}
	return n
}

// LagLine says how long the expiry took: "expiry lag (window's end to
// closed_at) of 81 orders: p50 120ms, p99 250ms, max 260ms (bound 5s)".
func (r *Reservations) LagLine() string {
	l := r.ExpiryLag
	if l.Count == 0 {
		return "expiry lag: no order expired"
	}
	return fmt.Sprintf("expiry lag (window's end to closed_at) of %d orders: p50 %v, p99 %v, max %v (bound %v)",
		l.Count, round(l.P50), round(l.P99), round(l.Max), r.Life.Lag)
}

// Colours of the orders' states in the charts.
const (
	colorReserved  = "#0891b2"
	colorPaid      = colorSold
	colorCancelled = "#94a3b8"
	colorExpired   = colorLimit
)

// LifeChart draws reserved, paid, cancelled and expired over the sale as
// an SVG: reserved at the end of each step, the others by then.
func (r *Reservations) LifeChart(w, h int) template.HTML {
	top := 0
	for _, st := range r.Steps {
		top = max(top, st.Reserved, st.Paid, st.Cancelled, st.Expired)
	}
	xmax := float64(len(r.Steps)) * r.Step.Seconds()
	c := newSVGChart(w, h, xmax, niceCeil(float64(top)), "life-chart")
	c.axes(countLabel, niceStep(xmax, 6), secondsLabel)
	for _, s := range []struct {
		class, color string
		v            func(LifeStep) int
	}{
		{"reserved", colorReserved, func(s LifeStep) int { return s.Reserved }},
		{"paid", colorPaid, func(s LifeStep) int { return s.Paid }},
		{"cancelled", colorCancelled, func(s LifeStep) int { return s.Cancelled }},
		{"expired", colorExpired, func(s LifeStep) int { return s.Expired }},
	} {
		pts := [][2]float64{{0, 0}}
		for _, st := range r.Steps {
			pts = append(pts, [2]float64{st.At.Seconds(), float64(s.v(st))})
		}
		c.line(pts, s.color, s.class, false)
	}
	return c.html()
}

// MoveKeys lists the buyers' moves in order, for the HTML report.
func (r *Reservations) MoveKeys() []string { return slices.Sorted(maps.Keys(r.Moves)) }
