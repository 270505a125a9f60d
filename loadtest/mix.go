package loadtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Mix is what is mixed into the purchases of a sale so that the
// linearizability check sees more than purchases: reads of the product,
// which show the state between purchases (a lost update, an order seen
// before its stock went down), and restocks, which make a sold-out answer
// wrong again (a stale sold-out). The zero value mixes nothing in.
type Mix struct {
	// Reads is the share, in [0, 1), of the attack's requests that read
	// the product (GET /api/v1/products/:id) instead of buying. They go
	// round-robin over the targets, like the purchases, and count towards
	// MaxRequests.
	Reads float64
	// Restocks is how many restocks a second (PUT
	// /api/v1/products/:id/stock) run beside the attack, one at a time and
	// round-robin over the targets, each to a random stock from 0 to the
	// stock the sale started with. They need the admin token.
	Restocks float64
	// RestockShare paces the same restocks by count instead of by time:
	// one is due each time another 1/RestockShare of the attack's requests
	// have been answered (0.02: one per 50). A sale then gets its restocks
	// however fast the target answers, where a rate gives a fast sale none.
	// Restocks still run one at a time: one that falls due while another
	// is in flight starts when that one ends, and further ones due
	// meanwhile are dropped. At most one of Restocks and RestockShare is
	// set.
	RestockShare float64
}

// maxRestockRate bounds Mix.Restocks: restocks run one at a time, and more
// would only queue behind each other.
const maxRestockRate = 100

// ParseMix reads a mix such as "reads=10%,restocks=1/s": reads as a
// percentage or a fraction ("reads=0.1"), restocks as a rate per second
// ("restocks=2/s", "restocks=2"), per minute ("restocks=30/m"), as an
// interval ("restocks=500ms") or as a percentage of the attack's requests
// ("restocks=2%": one per 50 answers, Mix.RestockShare). "" and "none"
// mix nothing in.
func ParseMix(s string) (Mix, error) {
	var m Mix
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return m, nil
	}
	for _, part := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Mix{}, fmt.Errorf("mix %q: %q is not key=value (reads=10%%,restocks=1/s)", s, part)
		}
		var err error
		switch strings.TrimSpace(key) {
		case "reads":
			m.Reads, err = parseShare("reads", strings.TrimSpace(val))
		case "restocks":
			m.Restocks, m.RestockShare, err = parseRestocks(strings.TrimSpace(val))
		default:
			err = fmt.Errorf("unknown key %q: want reads or restocks", key)
		}
		if err != nil {
			return Mix{}, fmt.Errorf("mix %q: %w", s, err)
		}
	}
	return m, m.validate()
}

func parseShare(key, v string) (float64, error) {
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a percentage (10%%) or a fraction (0.1)", key, v)
	}
	if pct {
		f /= 100
	}
	return f, nil
}

// parseRestocks reads a restock rate, or a share of the requests when v
// ends in "%".
func parseRestocks(v string) (rate, share float64, err error) {
	if strings.HasSuffix(v, "%") {
		share, err = parseShare("restocks", v)
		return 0, share, err
	}
	rate, err = parseRate(v)
	return rate, 0, err
}

func parseRate(v string) (float64, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("restocks every %v: want a positive interval", d)
		}
		return float64(time.Second) / float64(d), nil
	}
	num, per, _ := strings.Cut(v, "/")
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("restocks %q: want a rate (1/s, 30/m), an interval (500ms) or a share of the requests (2%%)", v)
	}
	switch per {
	case "", "s":
	case "m":
		f /= 60
	default:
		return 0, fmt.Errorf("restocks %q: want a rate per second (/s) or per minute (/m)", v)
	}
	return f, nil
}

func (m Mix) validate() error {
	switch {
	case math.IsNaN(m.Reads) || m.Reads < 0 || m.Reads >= 1:
		return fmt.Errorf("reads %v: want a share from 0 up to, not including, 100%%", m.Reads)
	case math.IsNaN(m.Restocks) || m.Restocks < 0 || m.Restocks > maxRestockRate:
		return fmt.Errorf("restocks %v/s: want 0 to %d a second", m.Restocks, maxRestockRate)
	case math.IsNaN(m.RestockShare) || m.RestockShare < 0 || m.RestockShare > 1:
		return fmt.Errorf("restocks %v%% of the requests: want 0 to 100%%", m.RestockShare*100)
	case m.Restocks > 0 && m.RestockShare > 0:
		return fmt.Errorf("restocks: a rate (%v/s) or a share of the requests (%v%%), not both", m.Restocks, m.RestockShare*100)
	}
	return nil
}

// restocks reports whether the mix restocks at all.
func (m Mix) restocks() bool { return m.Restocks > 0 || m.RestockShare > 0 }

// String is the mix as ParseMix reads it, "" for none.
func (m Mix) String() string {
	var parts []string
	if m.Reads > 0 {
		parts = append(parts, "reads="+strconv.FormatFloat(m.Reads*100, 'g', 4, 64)+"%")
	}
	if m.Restocks > 0 {
		parts = append(parts, "restocks="+strconv.FormatFloat(m.Restocks, 'g', 4, 64)+"/s")
	}
	if m.RestockShare > 0 {
		parts = append(parts, "restocks="+strconv.FormatFloat(m.RestockShare*100, 'g', 4, 64)+"%")
	}
	return strings.Join(parts, ",")
}

// readFragment marks the attack's reads, as the buyer's fragment marks its
// purchases: Vegeta copies the URL into each result.
const readFragment = "#read"

// isRead reports whether a result's URL is one of the attack's reads.
func isRead(rawURL string) bool { return strings.HasSuffix(rawURL, readFragment) }

// mixTargeter returns the attack's targeter: purchases from b, and a share
// of reads spread evenly (request n reads when the running total
// floor(n*share) steps up), round-robin over targets, each of a product
// drawn with the sale's skew.
func mixTargeter(b *buyers, targets []string, products []int64, skew Skew, share float64, seed uint64) vegeta.Targeter {
	purchase := b.targeter()
	if share <= 0 {
		return purchase
	}
	ids := make([]string, len(products))
	for i, id := range products {
		ids[i] = strconv.FormatInt(id, 10)
	}
	pick := skew.Picker(len(products), rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)))
	var mu sync.Mutex
	var n, reads uint64
	return func(t *vegeta.Target) error {
		mu.Lock()
		i := n
		n++
		read := math.Floor(float64(i+1)*share) > math.Floor(float64(i)*share)
		var url string
		if read {
			url = targets[reads%uint64(len(targets))] + "/api/v1/products/" + ids[pick()] + readFragment
			reads++
		}
		mu.Unlock()
		if !read {
			return purchase(t)
		}
		t.Method, t.URL, t.Body, t.Header = http.MethodGet, url, nil, nil
		return nil
	}
}

// restocks is the outcome of the restocks of one product.
type restocks struct {
	sent int
	// last is the answer of the last restock that succeeded; known is
	// false when a restock after it has an unknown outcome (or, with no
	// success, when any has), so the stock it left is not known.
	last  *Product
	known bool
}

// runRestocks restocks a product each time due delivers, one at a time
// and round-robin over apis, each of a product of products drawn by pick,
// to a random stock from 0 to that product's stock to sell (most),
// recording each into h, until stop is closed or ctx ends (which also
// aborts a restock in flight). A restock already due when stop closes
// still runs, and no other: the restocks a sale was due do not depend on
// how soon this goroutine got to run. It returns the outcome by product
// id, for the products restocked.
func runRestocks(ctx context.Context, apis []api, h *history, products []Product, pick func() int, seed uint64, due <-chan time.Time, stop <-chan struct{}) map[int64]*restocks {
	out := map[int64]*restocks{}
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	stopped := false
	next := func() bool {
		if stopped {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-due:
		case <-stop:
			stopped = true
			select {
			case <-due:
			default:
				return false
			}
		}
		select {
		case <-stop:
			stopped = true
		default:
		}
		return ctx.Err() == nil
	}
	for i := 0; next(); i++ {
		a := apis[i%len(apis)]
		p := products[pick()]
		rs := out[p.ID]
		if rs == nil {
			rs = &restocks{known: true}
			out[p.ID] = rs
		}
		stock := rng.Int64N(max(p.Stock+p.Sold, 0) + 1)
		call := time.Now()
		got, err := a.Restock(ctx, p.ID, stock)
		rs.sent++
		switch h.restock(p.ID, a.Base, call, time.Now(), stock, got, err) {
		case ResultOK:
			rs.last, rs.known = &got, true
		case ResultAmbiguous:
			rs.known = false
		}
	}
	return out
}

// beside is what runs beside the attack: the history of its results, and
// the restocks.
type beside struct {
	cfg      Config
	apis     []api
	hist     *history
	products []Product // as before the attack; index 0 the hottest

	reads    int
	answered uint64         // the attack's results so far
	due      chan time.Time // restocks paced by count (Mix.RestockShare)
	stop     chan struct{}
	wg       sync.WaitGroup
	restocks map[int64]*restocks // by product, once the restocks ended
	life     *lives              // the buyers' moves after their 201s
}

func newBeside(cfg Config, apis []api, hist *history, products []Product) *beside {
	return &beside{cfg: cfg, apis: apis, hist: hist, products: products,
		due: make(chan time.Time, 1), stop: make(chan struct{}), restocks: map[int64]*restocks{}}
}

// start starts the restocks, if any; they end with end, or with ctx.
func (s *beside) start(ctx context.Context) {
	if !s.cfg.Mix.restocks() {
		return
	}
	seed := rand.Uint64()
	pick := s.cfg.Skew.Picker(len(s.products), rand.New(rand.NewPCG(seed, seed^0x1b873593)))
	s.wg.Go(func() {
		var due <-chan time.Time = s.due
		if rate := s.cfg.Mix.Restocks; rate > 0 {
			t := time.NewTicker(time.Duration(float64(time.Second) / rate))
			defer t.Stop()
			due = t.C
		}
		s.restocks = runRestocks(ctx, s.apis, s.hist, s.products, pick, seed, due, s.stop)
	})
}

// restocksSent is how many restocks ran, over every product.
func (s *beside) restocksSent() int {
	n := 0
	for _, rs := range s.restocks {
		n += rs.sent
	}
	return n
}

// of is the outcome of the restocks of product id: none sent, and the
// stock known, when it had none.
func (s *beside) of(id int64) restocks {
	if rs := s.restocks[id]; rs != nil {
		return *rs
	}
	return restocks{known: true}
}

// result records one result of the attack and reports whether it was a
// read (not a purchase). A 201's order goes to the buyers' moves (lives). With restocks paced by count, it makes one due
// each time the running total floor(answered*share) steps up; a restock
// already due is not doubled.
func (s *beside) result(r *vegeta.Result) (read bool) {
	s.hist.result(r, s.cfg.Targets)
	if share := s.cfg.Mix.RestockShare; share > 0 {
		n := s.answered
		s.answered++
		if math.Floor(float64(n+1)*share) > math.Floor(float64(n)*share) {
			select {
			case s.due <- time.Now():
			default:
			}
		}
	}
	if isRead(r.URL) {
		s.reads++
		return true
	}
	if r.Code == http.StatusCreated && s.life != nil {
		if o, ok := createdOrder(r.Body); ok {
			s.life.reserved(o)
		}
	}
	return false
}

// end stops the restocks, lets one in flight finish, and waits for them.
func (s *beside) end() {
	close(s.stop)
	s.wg.Wait()
}

// mixText is the mix for the run's header line: "; mixed in:
// reads=10%, at most 8 requests in flight", or "" for none.
func mixText(cfg Config) string {
	if cfg.Mix == (Mix{}) {
		return ""
	}
	return fmt.Sprintf("; mixed in: %s, at most %d requests in flight", cfg.Mix, cfg.MaxWorkers)
}
