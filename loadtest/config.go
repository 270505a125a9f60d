package loadtest

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by Run to zero Config fields.
const (
	DefaultStock      = 100
	DefaultRate       = 200
	DefaultDuration   = 5 * time.Second
	DefaultTimeout    = 10 * time.Second
	DefaultWorkers    = 10
	DefaultMaxWorkers = 256
	// DefaultBuyers is the CLIs' burst: 20 buyers per item of the default
	// stock, all at once, as a flash sale opens.
	DefaultBuyers = 2000
	// MaxBurstWorkers caps the connections a burst opens per run: one per
	// buyer up to this many, so that the client sends a burst of a few
	// thousand buyers at once without becoming the bottleneck.
	MaxBurstWorkers = 5000
	// DefaultTarget is where a service started with its defaults listens.
	DefaultTarget = "http://127.0.0.1:8080"
	// DefaultMixInFlight is MaxWorkers of a sale with a Mix or a Life: at most this
	// many requests in flight, so that the linearizability check decides
	// in milliseconds. The check's search grows steeply with the requests
	// in flight on one product (a read must be placed after exactly the
	// purchases it saw, among all those running with it): a few more in
	// flight can take the check from milliseconds past DefaultCheckTimeout,
	// and the verdict is then unknown. To see it, compare the check's time
	// (Linearizability.Elapsed in -report-json) of
	// "seckill demo -buyers 1000 -mix reads=10%,restocks=2/s -max-workers N"
	// for N of 8, 12 and 16.
	DefaultMixInFlight = 8
)

// hardDeadlineSlack is added to Duration+Timeout to get the point where Run
// stops the attack whatever Vegeta is doing: the attack normally ends by
// Duration+Timeout, so reaching this means something hangs.
const hardDeadlineSlack = 5 * time.Second

// ErrInvalidConfig is wrapped by every error Run returns for a Config it
// refuses, so a CLI can tell usage errors from failures of the target.
var ErrInvalidConfig = errors.New("loadtest: invalid config")

// ProgressMode says how the live progress line is written.
type ProgressMode int

// Progress modes. The zero value, ProgressAuto, picks ProgressInPlace when the
// progress writer is a terminal and ProgressLines otherwise, so logs of CI
// runs get readable lines instead of carriage returns.
const (
	ProgressAuto ProgressMode = iota
	ProgressInPlace
	ProgressLines
	ProgressOff
)

// Config describes one sale. The zero value of every field except Targets
// (and AdminToken when a product has to be created) has a usable default.
type Config struct {
	// Targets are base URLs of the service ("http://127.0.0.1:8080", with an
	// optional path prefix), used round-robin: several replicas, or one load
	// balancer. Only http and https are accepted; traffic goes nowhere else
	// (no proxy from the environment, no redirects followed).
	Targets []string

	// AdminToken is the bearer token for POST /api/v1/products. It is needed
	// only when ProductID is 0.
	AdminToken string

	// ProductID selects an existing product. 0 creates a new one with Stock.
	// With an existing product, S is read before the attack as stock+sold, so
	// orders made before the run are accounted for.
	ProductID int64

	// Stock is the stock of each product created when ProductID is 0
	// (0 means DefaultStock).
	Stock int64

	// Products is how many products the sale creates and sells at once,
	// each with Stock (0 means 1, at most MaxProducts). With ProductID
	// set it must be 0 or 1.
	Products int

	// Skew spreads the buyers over the products, and the reads and
	// restocks of Mix too: the first product created is the hottest. The
	// zero value is DefaultSkew.
	Skew Skew

	// Rate is the request rate in requests per second (0 means DefaultRate).
	Rate int

	// RampTo, when positive, makes the rate change linearly from Rate to
	// RampTo over Duration (Vegeta's LinearPacer) instead of staying constant.
	RampTo int

	// Buyers, when positive, makes the sale a burst instead of a steady
	// rate: Buyers purchase requests, sent as fast as the client can, or
	// spread evenly over BurstWindow, each on a connection of its own (up
	// to MaxWorkers, by default one per buyer up to MaxBurstWorkers). Rate,
	// RampTo and Duration must then be zero.
	Buyers      int
	BurstWindow time.Duration

	// Duration is how long requests are sent (0 means DefaultDuration).
	Duration time.Duration

	// End, when not nil, ends the attack once it is closed, as the end of
	// Duration would: no request is sent after it, the requests in flight
	// get their answers, and the sale is verified and reported in full
	// (Report.Stopped stays empty, as for a sale that ran its course). It
	// is for a caller whose sale must last as long as something it does
	// beside it, such as a fault injected in phases, rather than a time
	// fixed in advance; Duration and MaxRequests still bound the sale.
	// Ending ctx instead interrupts the sale.
	End <-chan struct{}

	// MaxRequests bounds the number of the attack's requests: the
	// purchases, and the reads of a Mix. 0 means the number the pacing
	// would send in Duration (or Buyers), so the bound is always finite.
	MaxRequests int

	// RepeatShare, in [0, 1], is the share of requests that reuse the user id
	// of an earlier buyer (one who got 201 when there is one, else any earlier
	// user). The service must refuse them; a second 201 for a user fails the
	// duplicate-user invariant.
	RepeatShare float64

	// Timeout bounds each HTTP request, and the verification calls after an
	// interrupted attack (0 means DefaultTimeout).
	Timeout time.Duration

	// Workers is the number of Vegeta workers started with the attack and
	// MaxWorkers the most it may add to hold the rate when responses are slow
	// (0 means DefaultWorkers and DefaultMaxWorkers). MaxWorkers also caps
	// open connections per target. Past it, the rate drops rather than the
	// load tester running away with goroutines.
	Workers    int
	MaxWorkers int

	// Out, when set, is a file that receives every Vegeta result gob-encoded,
	// so `vegeta report` and `vegeta plot` can read it later.
	Out string

	// Plot, when set, is a file that receives Vegeta's HTML latency plot. It
	// embeds its JavaScript, so it opens offline.
	Plot string

	// Report and ReportJSON, when set, are files that receive the report:
	// a self-contained HTML page with charts (it opens offline), and the
	// Report as JSON, for scripts.
	Report, ReportJSON string

	// SampleInterval is how often the product is read during the attack,
	// for the report's chart of stock and sold as the server saw them (0
	// means DefaultSampleInterval; negative: never).
	SampleInterval time.Duration

	// ExpectOversell inverts the verdict (Report.OK): the run is meant for a
	// deliberately broken lock mode and passes only if an oversell is caught.
	ExpectOversell bool

	// Progress receives the live progress line; nil means the writer given to
	// Run. ProgressMode chooses in-place, plain lines or none.
	Progress     io.Writer
	ProgressMode ProgressMode

	// Mix mixes reads and restocks into the sale for the linearizability
	// check (see Mix). Restocks need AdminToken.
	Mix Mix

	// History, when set, is a file that receives the run's history: every
	// request's call and return times, input and outcome, one JSON object
	// per line (see Op). The history is kept in memory either way, up to
	// HistoryLimit operations (0 means DefaultHistoryLimit).
	History      string
	HistoryLimit int

	// CheckTimeout bounds the linearizability check of the history (0
	// means DefaultCheckTimeout); past it the verdict is unknown, which is
	// not a pass. SkipLinearizability leaves the check out: the verdict is
	// then the invariants' alone.
	CheckTimeout        time.Duration
	SkipLinearizability bool

	// Visualization is the file that receives porcupine's HTML
	// visualization when the history is not linearizable. "" puts it next
	// to History (FILE.html), else next to Plot, else in the temporary
	// directory; the report names it. NoVisualization leaves it out.
	Visualization   string
	NoVisualization bool

	// Life is what the buyers with a pending order do, when the service
	// gives its orders a payment window: pay, cancel or let it lapse,
	// and after the sale, wait for the expiry and close the sale out
	// (see Life). The sale then lasts until the last late payment, up to
	// half a window after the last window ends: use a window of seconds.
	Life Life

	// Settle, when positive, is how long the verification after the
	// attack may wait for the orders to catch up with the product's sold
	// count: a service that writes its orders in the background (the
	// redis-counter-async design) answers 201 before the order exists. The
	// check starts once the orders listed number the sold count, or when
	// Settle has passed. 0 checks at once.
	Settle time.Duration
}

// withDefaults returns cfg with zero fields replaced by defaults and targets
// normalised, or an error wrapping ErrInvalidConfig.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Targets) == 0 {
		cfg.Targets = []string{DefaultTarget}
	}
	targets := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		base, err := normalizeTarget(t)
		if err != nil {
			return cfg, err
		}
		targets[i] = base
	}
	cfg.Targets = targets

	cfg.Stock = cmp.Or(cfg.Stock, DefaultStock)
	cfg.Products = cmp.Or(cfg.Products, 1)
	cfg.Skew = cfg.Skew.orDefault()
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.SampleInterval = cmp.Or(cfg.SampleInterval, DefaultSampleInterval)
	switch {
	case cfg.Buyers < 0 || cfg.BurstWindow < 0:
		return cfg, invalid("buyers %d over %v: want a positive number of buyers and a window of 0 or more", cfg.Buyers, cfg.BurstWindow)
	case cfg.Buyers > 0 && (cfg.Rate != 0 || cfg.RampTo != 0 || cfg.Duration != 0):
		return cfg, invalid("a burst of %d buyers has no rate, ramp or duration: choose one shape", cfg.Buyers)
	case cfg.Buyers == 0 && cfg.BurstWindow != 0:
		return cfg, invalid("burst window %v without buyers: set the number of buyers", cfg.BurstWindow)
	}
	// The buyers' moves after their 201s (Life) change the state between
	// purchases as restocks do, and the check's search grows with them.
	if (cfg.Mix != (Mix{}) || cfg.Life != (Life{})) && cfg.MaxWorkers == 0 {
		cfg.MaxWorkers = DefaultMixInFlight
		if cfg.Workers == 0 || cfg.Workers > cfg.MaxWorkers {
			cfg.Workers = cfg.MaxWorkers
		}
	}
	switch {
	case cfg.Buyers > 0:
		cfg.MaxWorkers = cmp.Or(cfg.MaxWorkers, min(cfg.Buyers, MaxBurstWorkers))
		cfg.Workers = cmp.Or(cfg.Workers, cfg.MaxWorkers)
	default:
		cfg.Rate = cmp.Or(cfg.Rate, DefaultRate)
		cfg.Duration = cmp.Or(cfg.Duration, DefaultDuration)
		cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
		cfg.MaxWorkers = cmp.Or(cfg.MaxWorkers, max(DefaultMaxWorkers, cfg.Workers))
	}

	switch {
	case cfg.ProductID < 0:
		return cfg, invalid("product id %d: want 0 (create one) or a positive id", cfg.ProductID)
	case cfg.ProductID == 0 && (cfg.Stock < 0 || cfg.Stock > 10_000_000):
		return cfg, invalid("stock %d: want 1..10000000", cfg.Stock)
	case cfg.Products < 0 || cfg.Products > MaxProducts:
		return cfg, invalid("products %d: want 1..%d", cfg.Products, MaxProducts)
	case cfg.ProductID != 0 && cfg.Products > 1:
		return cfg, invalid("an existing product (id %d) sells alone: want products 1, or product id 0 to create %d", cfg.ProductID, cfg.Products)
	case cfg.ProductID == 0 && cfg.AdminToken == "":
		return cfg, invalid("creating a product needs the admin token (-admin-token or ADMIN_TOKEN), or pass an existing product id")
	case cfg.Rate < 0:
		return cfg, invalid("rate %d: want a positive number of requests per second", cfg.Rate)
	case cfg.RampTo < 0:
		return cfg, invalid("ramp-to %d: want a positive rate, or 0 for a constant rate", cfg.RampTo)
	case cfg.Duration < 0:
		return cfg, invalid("duration %v: want a positive duration", cfg.Duration)
	case cfg.MaxRequests < 0:
		return cfg, invalid("max requests %d: want 0 (bounded by the pacing) or more", cfg.MaxRequests)
	case math.IsNaN(cfg.RepeatShare) || cfg.RepeatShare < 0 || cfg.RepeatShare > 1:
		return cfg, invalid("repeat share %v: want a number in [0, 1]", cfg.RepeatShare)
	case cfg.Timeout < 0:
		return cfg, invalid("timeout %v: want a positive duration", cfg.Timeout)
	case cfg.Workers < 0 || cfg.MaxWorkers < cfg.Workers:
		return cfg, invalid("workers %d, max workers %d: want 1 <= workers <= max workers", cfg.Workers, cfg.MaxWorkers)
	case cfg.ProgressMode < ProgressAuto || cfg.ProgressMode > ProgressOff:
		return cfg, invalid("progress mode %d unknown", cfg.ProgressMode)
	case cfg.HistoryLimit < 0:
		return cfg, invalid("history limit %d: want 0 (the default, %d) or more", cfg.HistoryLimit, DefaultHistoryLimit)
	case cfg.CheckTimeout < 0:
		return cfg, invalid("check timeout %v: want a positive duration", cfg.CheckTimeout)
	case cfg.Settle < 0:
		return cfg, invalid("settle %v: want 0 (check at once) or a positive duration", cfg.Settle)
	case cfg.Mix.restocks() && cfg.AdminToken == "":
		return cfg, invalid("restocks need the admin token (-admin-token or ADMIN_TOKEN)")
	}
	if err := cfg.Mix.validate(); err != nil {
		return cfg, invalid("mix: %v", err)
	}
	if err := cfg.Life.validate(); err != nil {
		return cfg, invalid("%v", err)
	}
	if err := cfg.Skew.validate(); err != nil {
		return cfg, invalid("%v", err)
	}
	cfg.HistoryLimit = cmp.Or(cfg.HistoryLimit, DefaultHistoryLimit)
	cfg.CheckTimeout = cmp.Or(cfg.CheckTimeout, DefaultCheckTimeout)
	cfg.MaxRequests = cmp.Or(cfg.MaxRequests, cfg.expectedRequests())
	return cfg, nil
}

// expectedRequests is what the pacing sends: every buyer of a burst, or
// the area under the rate curve over Duration, rounded up.
func (cfg Config) expectedRequests() int {
	if cfg.Buyers > 0 {
		return cfg.Buyers
	}
	end := cfg.Rate
	if cfg.RampTo > 0 {
		end = cfg.RampTo
	}
	n := math.Ceil(float64(cfg.Rate+end) / 2 * cfg.Duration.Seconds())
	return max(1, int(n))
}

// hardDeadline is how long the attack may take before Run cuts it.
func (cfg Config) hardDeadline() time.Duration {
	return cfg.Duration + cfg.BurstWindow + cfg.Timeout + hardDeadlineSlack
}

// Shape describes the load in words, for the report: "burst of 2000
// buyers at once", "burst of 2000 buyers over 1s", "steady 300 req/s for
// 3s", "ramp 100 -> 300 req/s over 5s" (with End: "... at most, or until
// its caller ends it"), then, for several products, how the buyers
// spread: "over 2000 products, skew zipf:1.1".
func (cfg Config) Shape() string {
	s := cfg.shape()
	if cfg.Products > 1 {
		s += fmt.Sprintf(" over %d products, skew %s", cfg.Products, cfg.Skew.orDefault())
	}
	if cfg.Life != (Life{}) {
		// What the buyers do after a 201 with a payment window.
		s += "; buyers with a pending order " + cfg.Life.String()
	}
	return s
}

func (cfg Config) shape() string {
	s := cfg.pacingShape()
	if cfg.End != nil {
		s += " at most, or until its caller ends it"
	}
	return s
}

func (cfg Config) pacingShape() string {
	switch {
	case cfg.Buyers > 0 && cfg.BurstWindow == 0:
		return fmt.Sprintf("burst of %d buyers at once, on up to %d connections", cfg.Buyers, cfg.MaxWorkers)
	case cfg.Buyers > 0:
		return fmt.Sprintf("burst of %d buyers over %v, on up to %d connections", cfg.Buyers, cfg.BurstWindow, cfg.MaxWorkers)
	case cfg.RampTo > 0 && cfg.RampTo != cfg.Rate:
		return fmt.Sprintf("ramp %d -> %d req/s over %v", cfg.Rate, cfg.RampTo, cfg.Duration)
	}
	return fmt.Sprintf("steady %d req/s for %v", cfg.Rate, cfg.Duration)
}

// normalizeTarget checks that raw is an absolute http(s) URL without query or
// fragment and returns it without a trailing slash, ready for path joining.
func normalizeTarget(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", invalid("target %q: want an http:// or https:// base URL, such as %s", raw, DefaultTarget)
	}
	if u.Host == "" {
		return "", invalid("target %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", invalid("target %q: want a base URL without user info, query or fragment", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
