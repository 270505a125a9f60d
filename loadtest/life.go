package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The rest of a sale, from the buyers' side (docs/reservations.md): when
// the service gives its orders a payment window, a 201 is a reservation,
// and its buyer pays, cancels, or lets the window pass for the service to
// expire the order and put its unit back on sale, where the buyers still
// coming buy it again.

// Life is what the buyers with a pending order do. It matters only
// against a service with a payment window (PAY_WINDOW): without one, every
// order is paid when it is made. The zero value pays and cancels nothing:
// every reservation lapses.
type Life struct {
	// Pay and Cancel are the shares, each in [0, 1] and together at most
	// 1, of the buyers with a pending order who pay it and who cancel it;
	// the others let the window pass. Each acts at a random time in the
	// first half of the window that is left.
	Pay, Cancel float64
	// Late is the share of the payers, in [0, 1], who pay after the
	// window has ended, within half a window after it: the service must
	// refuse them (409 order_expired) and change nothing, whether or not
	// it has expired the order yet.
	Late float64
	// Lag bounds how long past its window an order may stay pending (the
	// expiry's lag): after the sale, Run waits, up to the latest window's
	// end plus Lag, until nothing is reserved, and invariant 10 fails an
	// order pending past its window plus Lag (0 means DefaultLag).
	Lag time.Duration
	// CloseOut, after the sale and the expiry, sends fresh buyers who all
	// pay to buy what came back of each product whose buyers outnumbered
	// its supply, until it is sold out (a bounded number of purchases and
	// time): every unit must then end sold (invariant 6).
	CloseOut bool
}

// allPaid reports whether every buyer pays on time: every unit reserved
// ends sold.
func (l Life) allPaid() bool { return l.Pay >= 1 && l.Late == 0 }

// DefaultLag is Life.Lag's default: generous for an expiry that runs
// every EXPIRE_INTERVAL (a tenth of the window, at most 1 s) on a loaded
// machine, and what Run waits at most after the sale when an expiry is
// stuck.
const DefaultLag = 5 * time.Second

// lifeInFlight bounds the payments and cancels in flight at once: they
// run beside the attack's purchases, and the check's search grows with
// the operations in flight (DefaultMixInFlight).
const lifeInFlight = 4

func (l Life) validate() error {
	for _, s := range []struct {
		name string
		v    float64
	}{{"pay", l.Pay}, {"cancel", l.Cancel}, {"late", l.Late}} {
		if math.IsNaN(s.v) || s.v < 0 || s.v > 1 {
			return fmt.Errorf("%s share %v: want a share from 0 to 1", s.name, s.v)
		}
	}
	switch {
	case l.Pay+l.Cancel > 1+1e-9:
		return fmt.Errorf("pay %v and cancel %v: together at most 1 (the rest lapse)", l.Pay, l.Cancel)
	case l.Lag < 0:
		return fmt.Errorf("lag %v: want 0 (the default, %v) or more", l.Lag, DefaultLag)
	}
	return nil
}

// String describes the buyers: "pay 70% (10% of them late), cancel 10%,
// lapse 20%, then a close-out".
func (l Life) String() string {
	pct := func(f float64) string { return strconv.FormatFloat(f*100, 'g', 4, 64) + "%" }
	s := "pay " + pct(l.Pay)
	if l.Late > 0 {
		s += " (" + pct(l.Late) + " of them late)"
	}
	s += ", cancel " + pct(l.Cancel) + ", lapse " + pct(max(0, 1-l.Pay-l.Cancel))
	if l.CloseOut {
		s += ", then a close-out"
	}
	return s
}

// fate is what a buyer with a pending order does.
type fate int

const (
	lapse fate = iota
	pay
	payLate
	cancel
)

// goldenStep spreads the fates: the n-th reservation draws frac(n·φ⁻¹),
// a sequence that fills [0, 1) evenly, so any run of them holds the
// shares (as the repeat buyers are spread by the running total).
const goldenStep = 0.6180339887498949

// lives runs the buyers' moves after their 201s, and after the sale
// waits for the expiry and closes the sale out. Its goroutines end with
// its context, or when their move is done; finish waits for them.
type lives struct {
	cfg    Life
	apis   []api
	hist   *history
	prefix string // the run's user ids: the close-out's buyers are prefix + "c" + a number
	ctx    context.Context
	sem    chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	rng       *rand.Rand
	n, payers int
	closers   int
	reserving bool          // a 201 made a pending order
	lastDue   time.Time     // the latest window's end answered
	window    time.Duration // the longest window seen
	moves     map[int64][]Move
	answers   map[string]int
	closing   map[int64]*closeOut
	waited    string // what the wait for the expiry found
}

// closeOut is what the close-out did for one product.
type closeOut struct {
	created, unknown int
	createdByUser    map[string]int
	paid             int
}

func newLives(ctx context.Context, cfg Life, apis []api, hist *history, prefix string, seed uint64) *lives {
	if cfg.Lag == 0 {
		cfg.Lag = DefaultLag
	}
	return &lives{cfg: cfg, apis: apis, hist: hist, prefix: prefix, ctx: ctx, sem: make(chan struct{}, lifeInFlight),
		rng: rand.New(rand.NewPCG(seed, seed^0x7f4a7c159e3779b9)), moves: map[int64][]Move{},
		answers: map[string]int{}, closing: map[int64]*closeOut{}}
}

// reserved takes a 201's order: if it is pending, its buyer's move is
// drawn and, unless the buyer lets it lapse, run at its time.
func (l *lives) reserved(o Order) {
	if o.State != StatePending || o.ExpiresAt.IsZero() {
		return
	}
	l.mu.Lock()
	l.reserving = true
	if o.ExpiresAt.After(l.lastDue) {
		l.lastDue = o.ExpiresAt
	}
	window := o.ExpiresAt.Sub(o.CreatedAt)
	l.window = max(l.window, window)
	u := math.Mod(float64(l.n)*goldenStep, 1)
	a := l.apis[l.n%len(l.apis)]
	l.n++
	f := lapse
	switch {
	case u < l.cfg.Pay:
		f = pay
		if math.Mod(float64(l.payers)*goldenStep+0.5, 1) < l.cfg.Late {
			f = payLate
		}
		l.payers++
	case u < l.cfg.Pay+l.cfg.Cancel:
		f = cancel
	}
	var at time.Time
	switch f {
	case pay, cancel:
		left := max(0, time.Until(o.ExpiresAt)/2)
		at = time.Now().Add(time.Duration(l.rng.Int64N(int64(left) + 1)))
	case payLate:
		at = o.ExpiresAt.Add(2*dueSlack + time.Duration(l.rng.Int64N(int64(max(window/2, time.Millisecond)))))
	default:
		l.answers["lapse"]++
	}
	l.mu.Unlock()
	if f == lapse {
		return
	}
	l.wg.Go(func() {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		select {
		case l.sem <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		defer func() { <-l.sem }()
		l.move(a, f, o)
	})
}

// move pays or cancels o, and records what came of it.
func (l *lives) move(a api, f fate, o Order) {
	kind := OpPay
	if f == cancel {
		kind = OpCancel
	}
	call := time.Now()
	var err error
	if kind == OpPay {
		_, err = a.Pay(l.ctx, o.ID, o.UserID)
	} else {
		_, err = a.Cancel(l.ctx, o.ID, o.UserID)
	}
	res := l.hist.move(kind, o, a.Base, call, time.Now(), err)
	m := Move{Kind: kind, Product: o.ProductID, Order: o.ID, Status: http.StatusOK, Call: call, Due: o.ExpiresAt}
	if apiErr, ok := errors.AsType[*APIError](err); ok {
		m.Status, m.Code = apiErr.Status, apiErr.Code
	}
	key := string(kind) + " " + moveKey(err)
	if f == payLate {
		key = "late " + key
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[key]++
	if res == ResultOK {
		l.moves[o.ProductID] = append(l.moves[o.ProductID], m)
	}
}

// moveKey names a move's answer as the report's outcomes do: "200", "409
// order_expired", "error".
func moveKey(err error) string {
	apiErr, ok := errors.AsType[*APIError](err)
	switch {
	case err == nil:
		return "200"
	case !ok:
		return "error"
	case apiErr.Code == "":
		return strconv.Itoa(apiErr.Status)
	}
	return strconv.Itoa(apiErr.Status) + " " + apiErr.Code
}

// finish ends the buyers' part once the attack is over: it waits for the
// moves still to come (the late payers pay up to half a window after
// their window), then, when the sale ended normally and its orders have a
// window, for the expiry to return every lapsed unit (bounded by the
// latest window's end plus Lag), and runs the close-out. It writes a line
// for each to w.
func (l *lives) finish(products []Product, demand []int, normal bool, w io.Writer) {
	l.wg.Wait()
	if !l.reserving || !normal || l.ctx.Err() != nil {
		return
	}
	l.waitExpiry(products, w)
	if !l.cfg.CloseOut {
		return
	}
	var hot []Product
	for i, p := range products {
		if int64(demand[i]) > supply(p) {
			hot = append(hot, p)
		}
	}
	l.closeOut(hot, w)
}
