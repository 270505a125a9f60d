package demo

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// Defaults of the demo's own flags. The sale is a burst of
// loadtest.DefaultBuyers buyers for loadtest.DefaultStock items; with
// -rate or -duration it is a steady load at these defaults instead.
const (
	DefaultReplicas = 2
	DefaultRate     = 300
	DefaultDuration = 5 * time.Second
	maxReplicas     = 16
	// defaultAsyncSettle is -settle's default for redis-counter-async:
	// longer than a writer takes over another's orders
	// (app.Config.OrderClaimIdle's default), so that a replica that died
	// holding orders does not fail the check while they are still on
	// their way.
	defaultAsyncSettle = 10 * time.Second
)

// The selections of -matrix's rows (-rows): the default rows, which the
// matrix runs without -rows; the reservation rows, a sale with a payment
// window on each design that has one and on the lock design under the
// faults of an order's expiry (a minute more on their own, so apart); or
// both.
const (
	rowsDefault      = "default"
	rowsReservations = "reservations"
	rowsAll          = "all"
)

// Where the Redis of the redis lock mode comes from (-redis, or the
// SECKILL_DEMO_REDIS environment variable).
const (
	redisAuto     = "auto"     // redis-server when on PATH, else embedded
	redisServer   = "server"   // redis-server, or fail
	redisEmbedded = "embedded" // miniredis in this process
)

// options is the parsed command line.
type options struct {
	// command runs a replica as a process of its own (Command's); nil
	// runs them all in this process.
	command  ReplicaCommand
	replicas int
	redis    string // redisAuto, redisServer or redisEmbedded
	matrix   bool
	// designSet is true when -design was given: with -matrix it picks
	// that design's rows.
	designSet bool
	// rows is -matrix's selection of rows: rowsDefault, rowsReservations
	// or rowsAll.
	rows    string
	keep    bool   // serve the replicas after the sale, until Ctrl-C
	logFile string // replica logs; "" is the default destination

	// sale holds the load test's settings, without targets and token.
	sale loadtest.Config
	// svc holds the replicas' settings, without addresses and database.
	svc app.Config
}

const usageText = `Usage: seckill demo [flags]

Starts Redis (redis-server when it is on PATH, otherwise an embedded one), a
temporary SQLite database and -replicas replicas of the service on loopback
ports, runs a flash sale against all of them, prints the report and the
verdict, and removes everything it started.

The sale is a burst: -buyers buyers at once (or over -burst-window). -rate
and -duration make it a steady load instead. -products N sells N products
at once, each with -stock, the buyers spread over them by -skew (a few hot
products and a long tail); each product is checked on its own, and the
report lists the hottest. Every request is recorded, and
the sale's history is checked for linearizability (porcupine): the report
says "linearizable: yes", NO with the smallest anomaly found, or unknown,
which is not a pass. -mix reads=10%,restocks=2/s mixes reads and restocks
into the sale so that the check sees the state between purchases;
restocks=1% paces the restocks by the requests instead (one per 100), so
that a fast sale gets them too. The sale then runs at most 8 requests in
flight (-max-workers), so that the check decides in milliseconds.

Every replica serves the live dashboard at /dashboard (its URL is printed);
-keep keeps Redis and the replicas running after the sale, until Ctrl-C, to
look at it. -report FILE.html writes the report as a page with charts.

-design picks how a purchase is decided: lock (the default: the Redis lock
and its fence), conditional (one UPDATE ... WHERE stock > 0 transaction),
redis-counter (a Lua stock counter in Redis, then the insert) or
redis-counter-async (the counter, 201 at once, orders written in the
background; the check waits for them, up to -settle).

-window D gives the replicas a payment window (PAY_WINDOW): a 201 reserves,
and the buyers pay (-pay), cancel (-cancel), or let the window pass for the
replicas to expire the order and put the unit back on sale, where later
buyers buy it again; -pay-late of the payers pay after the window, to be
refused. The burst then lasts four windows (-burst-window), and after it
fresh buyers who all pay buy what came back. -unsafe-expiry unlocked or
unchecked and -unsafe-pay-late switch off a safeguard of that life: the
checks must catch it.

-matrix runs a short sale per lock mode, design and fault instead, and
prints one table that shows where the sale oversells and where it does
not; with -design, only that design's rows. -rows reservations runs the
reservation rows instead (a payment window; on the lock design, replicas
killed, stopped or racing a payment while they expire orders, and the
controls of the expiry), -rows all both.

Exit status: 0 when the verdict is a pass (with -matrix: every row as
expected), 1 when it is not (an oversell or a history that is not
linearizable, or with -expect-oversell neither), 2 for usage errors and
failures to start or to run. A sale that was to show a fault or an
oversell and did not runs again on fresh replicas, 3 sales at most.

Environment: SECKILL_DEMO_REDIS=auto|server|embedded is the default of -redis.

Flags:
`

// serviceFlags are the flags that configure the replicas: -matrix sets
// them per row, so giving one with -matrix is a mistake worth saying.
var serviceFlags = []string{"lock", "settle", "lock-ttl", "lock-renew", "batch-max", "chaos-pause", "chaos-prob", "unsafe-no-fence", "expect-oversell", "out", "plot", "history",
	"window", "expire-interval", "unsafe-expiry", "unsafe-pay-late", "chaos-expiry-pause"}

// parseFlags turns args into options. It returns flag.ErrHelp for -h, and
// errFlagParse when the flag package has already printed the problem.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	o := options{svc: app.DefaultConfig()}
	fs := flag.NewFlagSet("seckill demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}

	redisDefault := getenv("SECKILL_DEMO_REDIS")
	if redisDefault == "" {
		redisDefault = redisAuto
	}
	fs.IntVar(&o.replicas, "replicas", DefaultReplicas, "number of service replicas sharing Redis and the database")
	fs.StringVar(&o.redis, "redis", redisDefault, "`where` Redis comes from: auto (redis-server if on PATH, else embedded), server or embedded")
	fs.BoolVar(&o.matrix, "matrix", false, "run a short sale per lock mode and fault, and print one table")
	fs.StringVar(&o.rows, "rows", rowsDefault, "with -matrix, `which` rows: default, reservations (a payment window, its expiry under faults) or all")
	fs.BoolVar(&o.keep, "keep", false, "after the sale, keep Redis and the replicas running, to look at the dashboard, until Ctrl-C")
	fs.StringVar(&o.logFile, "log", "", "append the replicas' warnings and errors to this `file` (default: only count them)")

	fs.Int64Var(&o.sale.Stock, "stock", loadtest.DefaultStock, "stock of each product on sale")
	fs.IntVar(&o.sale.Products, "products", 1, "sell this many products at once, each with -stock (at most 100000)")
	skew := fs.String("skew", loadtest.DefaultSkew.String(), "how the buyers spread over -products: uniform, zipf:S (S > 1) or pow:K (K >= 1; product floor(N*u^K))")
	fs.IntVar(&o.sale.Buyers, "buyers", loadtest.DefaultBuyers, "burst: this many buyers, all at once (or over -burst-window)")
	fs.DurationVar(&o.sale.BurstWindow, "burst-window", 0, "burst: spread the buyers evenly over this `duration`; 0 sends them at once")
	fs.IntVar(&o.sale.Rate, "rate", DefaultRate, "steady load instead of a burst: purchase requests per second")
	fs.DurationVar(&o.sale.Duration, "duration", DefaultDuration, "steady load: how long to send requests")
	fs.Float64Var(&o.sale.RepeatShare, "repeat-share", loadtest.DefaultRepeatShare, "share of requests, 0..1, that reuse an earlier buyer and must be refused")
	fs.BoolVar(&o.sale.ExpectOversell, "expect-oversell", false, "pass only if an oversell is detected (for the broken lock modes)")
	fs.StringVar(&o.sale.Out, "out", "", "write Vegeta's results to this `file` (gob, for vegeta report and vegeta plot)")
	fs.StringVar(&o.sale.Plot, "plot", "", "write Vegeta's HTML latency plot to this `file`")
	fs.StringVar(&o.sale.Report, "report", "", "write the report as a self-contained HTML page with charts to this `file` (with -matrix: the matrix, a chart per row)")
	fs.StringVar(&o.sale.ReportJSON, "report-json", "", "write the report as JSON to this `file` (with -matrix: every row's)")
	fs.IntVar(&o.sale.MaxWorkers, "max-workers", 0, "most requests in flight (attack workers and connections per replica); 0: one per buyer of a burst")
	mix := fs.String("mix", "", "mix reads and restocks into the sale for the linearizability check, e.g. reads=10%,restocks=1/s, or restocks=1% for one per 100 requests")
	fs.StringVar(&o.sale.History, "history", "", "write the sale's history, one operation per line, to this `file` (JSON lines)")
	fs.DurationVar(&o.sale.CheckTimeout, "check-timeout", loadtest.DefaultCheckTimeout, "longest linearizability check; past it the verdict is unknown")

	design := string(o.svc.Design)
	fs.StringVar(&design, "design", design, "purchase `design`: lock, conditional, redis-counter or redis-counter-async (with -matrix: only its rows)")
	fs.DurationVar(&o.sale.Settle, "settle", 0, "after the sale, wait up to this long for the orders to number the sold count; 0: 10s for redis-counter-async, else none")
	lock := string(o.svc.Lock)
	fs.StringVar(&lock, "lock", lock, "lock `mode`: redis, none (no lock: oversells) or local (in-process mutex: oversells with 2 replicas)")
	fs.DurationVar(&o.svc.LockTTL, "lock-ttl", o.svc.LockTTL, "lock lease")
	fs.DurationVar(&o.svc.LockWait, "lock-wait", o.svc.LockWait, "longest wait for a lock before 503 busy")
	fs.BoolVar(&o.svc.LockRenew, "lock-renew", o.svc.LockRenew, "renew leases in the background")
	fs.IntVar(&o.svc.BatchMax, "batch-max", o.svc.BatchMax, "most purchases of one product served per lock hold (group commit); 1 serves them one at a time")
	fs.DurationVar(&o.svc.ChaosPause, "chaos-pause", o.svc.ChaosPause, "fault injection: lock holders sleep this long between their checks and their writes")
	fs.Float64Var(&o.svc.ChaosProb, "chaos-prob", o.svc.ChaosProb, "fault injection: `probability` (0..1) of the chaos pause")
	fs.BoolVar(&o.svc.UnsafeNoFence, "unsafe-no-fence", o.svc.UnsafeNoFence, "UNSAFE, for demonstrations: turn fencing off in redis mode")

	fs.DurationVar(&o.svc.PayWindow, "window", 0, "payment window of a purchase (PAY_WINDOW): the buyers pay, cancel or let it lapse; 0: orders are final at once")
	fs.Float64Var(&o.sale.Life.Pay, "pay", defaultPay, "with -window: share, 0..1, of the buyers with a pending order who pay it")
	fs.Float64Var(&o.sale.Life.Cancel, "cancel", defaultCancel, "with -window: share, 0..1, of the buyers with a pending order who cancel it (the others let it lapse)")
	fs.Float64Var(&o.sale.Life.Late, "pay-late", defaultPayLate, "with -window: share, 0..1, of the payers who pay after the window, to be refused")
	fs.DurationVar(&o.svc.ExpireInterval, "expire-interval", 0, "with -window: how often each replica expires due orders; 0: a tenth of the window, 50ms to 1s")
	fs.StringVar(&o.svc.UnsafeExpiry, "unsafe-expiry", "", "UNSAFE, for demonstrations: `unlocked` (units go back outside the lock and the fence) or `unchecked` (due orders expire whatever their state)")
	fs.BoolVar(&o.svc.UnsafePayLate, "unsafe-pay-late", false, "UNSAFE, for demonstrations: a payment after its window is accepted, also of an expired order")
	fs.DurationVar(&o.svc.ChaosExpiryPause, "chaos-expiry-pause", 0, "fault injection: expiries sleep this long between their read and their write; with -unsafe-expiry unlocked, 0 means a fifth of the window")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, errFlagParse
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: flags only", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.svc.Lock = app.LockMode(strings.ToLower(lock))
	o.svc.Design = app.Design(strings.ToLower(design))
	o.designSet = set["design"]
	if o.sale.Settle == 0 && o.svc.Design == app.DesignCounterAsync {
		o.sale.Settle = defaultAsyncSettle
	}
	if err := loadtest.ShapeFromFlags(fs, &o.sale); err != nil {
		return o, err
	}
	o.sale.Life.CloseOut = true
	if o.svc.PayWindow > 0 {
		o.withWindow(set)
	} else {
		o.sale.Life = loadtest.Life{}
	}
	var err error
	if o.sale.Mix, err = loadtest.ParseMix(*mix); err != nil {
		return o, fmt.Errorf("-mix: %w", err)
	}
	if o.sale.Skew, err = loadtest.ParseSkew(*skew); err != nil {
		return o, fmt.Errorf("-skew: %w", err)
	}
	if o.matrix {
		var clash []string
		for _, name := range serviceFlags {
			if set[name] {
				clash = append(clash, "-"+name)
			}
		}
		if len(clash) > 0 {
			return o, fmt.Errorf("-matrix chooses these per row; drop %s", strings.Join(clash, " "))
		}
		if o.keep {
			return o, errors.New("-keep: the matrix stops each row's replicas after its sale; drop -keep or -matrix")
		}
	} else if set["rows"] {
		return o, errors.New("-rows picks rows of -matrix: give -matrix too")
	}
	return o, o.validate()
}

// Defaults of the buyers' moves with -window: most pay, some of them
// late, a few cancel, and a fifth let the window pass.
const (
	defaultPay     = 0.7
	defaultCancel  = 0.1
	defaultPayLate = 0.1
	// windowsPerSale is how many windows the burst lasts by default with
	// -window: enough for units to come back and be bought again, twice
	// or more.
	windowsPerSale = 4
	// unlockedPauseShare: with -unsafe-expiry unlocked and no
	// -chaos-expiry-pause, the expiry pauses this share of the window
	// between its read and its write, so that purchases land in between.
	unlockedPauseShare = 5
)

// withWindow settles a sale with a payment window: a burst over four
// windows unless its shape was given, the bound of the expiry's lag, and
// the unlocked expiry's pause.
func (o *options) withWindow(set map[string]bool) {
	if o.sale.Buyers > 0 && !set["burst-window"] {
		o.sale.BurstWindow = windowsPerSale * o.svc.PayWindow
	}
	if o.svc.UnsafeExpiry == "unlocked" && !set["chaos-expiry-pause"] {
		o.svc.ChaosExpiryPause = o.svc.PayWindow / unlockedPauseShare
	}
	o.sale.Life.Lag = expiryLag(o.svc)
}

// expiryLag is the bound the demo states for the expiry's lag: a pass
// every ExpiryEvery, a wait in the lock's queue of a product whose
// purchases hold its lock (LockWait), the expiry's chaos pause, and a
// second for the round's transaction on a loaded machine.
func expiryLag(cfg app.Config) time.Duration {
	return cfg.ExpiryEvery() + cfg.LockWait + cfg.ChaosExpiryPause + time.Second
}

// errFlagParse marks errors the flag package has already printed.
var errFlagParse = errors.New("flag parse error")

// validate refuses what would fail later, before anything is started.
func (o options) validate() error {
	var errs []error
	if o.replicas < 1 || o.replicas > maxReplicas {
		errs = append(errs, fmt.Errorf("-replicas %d: want 1..%d", o.replicas, maxReplicas))
	}
	switch o.redis {
	case redisAuto, redisServer, redisEmbedded:
	default:
		errs = append(errs, fmt.Errorf("-redis %q: want auto, server or embedded", o.redis))
	}
	switch o.rows {
	case rowsDefault, rowsReservations, rowsAll:
	default:
		errs = append(errs, fmt.Errorf("-rows %q: want default, reservations or all", o.rows))
	}
	// Zero would mean "default" to loadtest.Run; on a command line it is a
	// mistake.
	if o.sale.Stock <= 0 || o.sale.Products <= 0 || o.sale.Buyers < 0 || (o.sale.Buyers == 0 && (o.sale.Rate <= 0 || o.sale.Duration <= 0)) {
		errs = append(errs, errors.New("-stock, -products and -buyers (or -rate and -duration) must be positive"))
	}
	if o.sale.Products > loadtest.MaxProducts {
		errs = append(errs, fmt.Errorf("-products %d: want at most %d", o.sale.Products, loadtest.MaxProducts))
	}
	if o.svc.PayWindow == 0 && (o.svc.UnsafeExpiry != "" || o.svc.UnsafePayLate || o.svc.ChaosExpiryPause > 0 || o.svc.ExpireInterval > 0) {
		errs = append(errs, errors.New("-unsafe-expiry, -unsafe-pay-late, -chaos-expiry-pause and -expire-interval act on reservations: give -window too"))
	}
	if err := o.svc.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// needsRedis says whether any sale of this run uses Redis: the lock modes
// none and local, and the conditional design, need none, so the demo does
// not start one for them.
func (o options) needsRedis() bool { return o.matrix || o.svc.UsesRedis() }
