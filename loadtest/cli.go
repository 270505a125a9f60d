package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes of Main.
const (
	// ExitOK: every safety invariant held (with -expect-oversell: an
	// oversell was caught).
	ExitOK = 0
	// ExitFail: a safety invariant failed (with -expect-oversell: none did).
	ExitFail = 1
	// ExitError: no verdict, because of a usage error or a target that could
	// not be reached, refused the set-up or could not be read back.
	ExitError = 2
)

// DefaultRepeatShare is the CLI's share of repeat buyers: enough to exercise
// the one-order-per-user rule on every run without crowding out demand.
const DefaultRepeatShare = 0.05

const usageText = `Usage: seckill loadtest [flags]

Runs a flash sale against the seckill API: creates a product with -stock
units (or uses -product), sends purchase requests from distinct users, then
reads the product and its orders back and checks that nothing was oversold.
-products N sells N products at once, each with -stock units, the buyers
spread over them by -skew (a few hot products and a long tail, as a real
sale has); every product is checked on its own, and the report lists the
hottest.

The load is a burst by default: -buyers requests (2000) sent at once, or
spread over -burst-window, as a flash sale opens. -rate with -duration (and
-ramp-to) sends a steady (or ramping) rate instead.

Every request's call and return time, input and outcome is recorded, and the
history is checked for linearizability against a model of the API, product
by product (porcupine): the report's "linearizable:" line says yes, NO with
the smallest anomaly found, or unknown (the check ran out of -check-timeout,
which is not a pass). -mix mixes reads and restocks into the sale, so that
the check sees the state between purchases; -history writes the history
as JSON lines. On a violation, porcupine's visualization is written next
to the history (or the plot, or in the temporary directory).

Against a service with a payment window (PAY_WINDOW), a 201 reserves: -pay
and -cancel are the shares of the buyers with a pending order who pay and
who cancel, the others let the window pass; -pay-late the share of the
payers who pay after it, to be refused. After the sale, the check waits for
the expiry (up to -lag past the last window) and, with -close-out, fresh
buyers who all pay buy what came back. The invariants and the history then
judge each order's life too.

Exit status: 0 when every safety invariant held and the history is
linearizable, 1 when an invariant failed (oversell), the history is not
linearizable or its check came out unknown, 2 for usage or connection
errors. -expect-oversell passes only on an oversell or a violation, for the
deliberately broken lock modes.

Flags:
`

// Main is the "seckill loadtest" command: it parses args (without the
// command name), reads ADMIN_TOKEN through getenv, runs the sale and returns
// the exit code (ExitOK, ExitFail or ExitError). The progress and the report
// go to stdout, errors and usage to stderr.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		// The flag package has already printed its own parse errors.
		if !errors.Is(err, errFlagParse) {
			fmt.Fprintf(stderr, "%v\nRun 'seckill loadtest -h' for usage.\n", err)
		}
		return ExitError
	}

	rep, err := Run(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, ErrInvalidConfig) {
			fmt.Fprintln(stderr, "Run 'seckill loadtest -h' for usage.")
		}
		return ExitError
	}
	if rep.OK() {
		return ExitOK
	}
	return ExitFail
}

// ShapeFromFlags settles the load's shape from the flags given on fs: the
// burst of -buyers by default, the steady rate when -rate, -ramp-to or
// -duration is given. Both at once is a mistake. The demo's command line,
// which has the same flags, follows the same rule.
func ShapeFromFlags(fs *flag.FlagSet, cfg *Config) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	steady := set["rate"] || set["ramp-to"] || set["duration"]
	switch {
	case steady && (set["buyers"] || set["burst-window"]):
		return errors.New("loadtest: -buyers and -burst-window make a burst, -rate, -ramp-to and -duration a steady load: choose one")
	case steady:
		cfg.Buyers = 0
	default:
		cfg.Rate, cfg.RampTo, cfg.Duration = 0, 0, 0
	}
	return nil
}

// errFlagParse marks errors the flag package has already reported.
var errFlagParse = errors.New("flag parse error")

// parseFlags turns the command line into a Config. Validation beyond syntax
// is left to Run, so the library and the CLI refuse the same things.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("seckill loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}

	var cfg Config
	targets := fs.String("targets", DefaultTarget, "comma-separated base URLs of the service, used round-robin")
	// No default shown: -h must not print the secret read from the environment.
	token := fs.String("admin-token", "", "admin token, needed to create the product (default $ADMIN_TOKEN)")
	fs.Int64Var(&cfg.ProductID, "product", 0, "existing product id to sell; 0 creates a product with -stock")
	fs.Int64Var(&cfg.Stock, "stock", DefaultStock, "stock of each created product")
	fs.IntVar(&cfg.Products, "products", 1, "sell this many products at once, each with -stock (at most 100000)")
	skew := fs.String("skew", DefaultSkew.String(), "how the buyers spread over -products: uniform, zipf:S (S > 1) or pow:K (K >= 1; product floor(N*u^K))")
	fs.IntVar(&cfg.Buyers, "buyers", DefaultBuyers, "burst: this many buyers, all at once (or over -burst-window)")
	fs.DurationVar(&cfg.BurstWindow, "burst-window", 0, "burst: spread the buyers evenly over this `duration`; 0 sends them at once")
	fs.IntVar(&cfg.Rate, "rate", DefaultRate, "steady load instead of a burst: purchase requests per second (at the start, with -ramp-to)")
	fs.IntVar(&cfg.RampTo, "ramp-to", 0, "steady load: ramp linearly from -rate to this rate over -duration; 0 keeps the rate constant")
	fs.DurationVar(&cfg.Duration, "duration", DefaultDuration, "steady load: how long to send requests")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 0, "most requests to send (purchases, and the reads of -mix); 0 means what the pacing sends in -duration")
	fs.Float64Var(&cfg.RepeatShare, "repeat-share", DefaultRepeatShare, "share of requests, 0..1, that reuse an earlier buyer and must be refused")
	fs.DurationVar(&cfg.Timeout, "timeout", DefaultTimeout, "timeout of each request")
	fs.IntVar(&cfg.Workers, "workers", 0, "initial number of attack workers (default 10; a burst: one per buyer)")
	fs.IntVar(&cfg.MaxWorkers, "max-workers", 0, "most attack workers and connections per target (default 256; a burst: one per buyer, up to 5000)")
	fs.StringVar(&cfg.Out, "out", "", "write Vegeta's results to this `file` (gob, for vegeta report and vegeta plot)")
	fs.StringVar(&cfg.Plot, "plot", "", "write Vegeta's HTML latency plot to this file")
	fs.StringVar(&cfg.Report, "report", "", "write the report as a self-contained HTML page with charts to this `file`")
	fs.StringVar(&cfg.ReportJSON, "report-json", "", "write the report as JSON to this `file`")
	fs.BoolVar(&cfg.ExpectOversell, "expect-oversell", false, "exit 0 only if an oversell is detected (for the broken lock modes)")
	progress := fs.String("progress", "auto", "progress line: auto, inplace, lines or off")
	mix := fs.String("mix", "", "mix reads and restocks into the sale for the linearizability check, e.g. reads=10%,restocks=1/s, or restocks=1% for one per 100 requests whatever their pace (restocks need the admin token)")
	fs.StringVar(&cfg.History, "history", "", "write the history, one operation per line, to this `file` (JSON lines)")
	fs.DurationVar(&cfg.CheckTimeout, "check-timeout", DefaultCheckTimeout, "longest linearizability check; past it the verdict is unknown")
	fs.DurationVar(&cfg.Settle, "settle", 0, "after the attack, wait up to this long for the orders to number the sold count (a service that writes orders in the background, DESIGN=redis-counter-async); 0 checks at once")
	fs.Float64Var(&cfg.Life.Pay, "pay", 0, "with a payment window: share, 0..1, of the buyers with a pending order who pay it")
	fs.Float64Var(&cfg.Life.Cancel, "cancel", 0, "with a payment window: share, 0..1, of the buyers with a pending order who cancel it (the others let it lapse)")
	fs.Float64Var(&cfg.Life.Late, "pay-late", 0, "with a payment window: share, 0..1, of the payers who pay after the window, to be refused")
	fs.DurationVar(&cfg.Life.Lag, "lag", 0, "with a payment window: longest an order may stay pending past its window (the expiry's lag); 0: 5s")
	fs.BoolVar(&cfg.Life.CloseOut, "close-out", false, "with a payment window: after the sale, fresh buyers who all pay buy what came back, so every unit must end sold")
	check := fs.Bool("linearizability", true, "check the history for linearizability (false: the invariants alone decide)")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errFlagParse
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("loadtest: unexpected argument %q: flags only", fs.Arg(0))
	}

	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Targets = append(cfg.Targets, t)
		}
	}
	if len(cfg.Targets) == 0 {
		return cfg, errors.New("loadtest: -targets: want at least one base URL")
	}
	cfg.AdminToken = *token
	if cfg.AdminToken == "" {
		cfg.AdminToken = getenv("ADMIN_TOKEN")
	}
	modes := map[string]ProgressMode{"auto": ProgressAuto, "inplace": ProgressInPlace, "lines": ProgressLines, "off": ProgressOff}
	mode, ok := modes[*progress]
	if !ok {
		return cfg, fmt.Errorf("loadtest: -progress %q: want auto, inplace, lines or off", *progress)
	}
	cfg.ProgressMode = mode
	m, err := ParseMix(*mix)
	if err != nil {
		return cfg, fmt.Errorf("loadtest: -mix: %w", err)
	}
	cfg.Mix = m
	cfg.SkipLinearizability = !*check
	if cfg.Skew, err = ParseSkew(*skew); err != nil {
		return cfg, fmt.Errorf("loadtest: -skew: %w", err)
	}
	if err := ShapeFromFlags(fs, &cfg); err != nil {
		return cfg, err
	}
	// Zero would mean "default" to Run; on the command line it is a mistake.
	if cfg.Stock <= 0 || cfg.Products <= 0 || cfg.Timeout <= 0 || cfg.Workers < 0 || cfg.MaxWorkers < 0 || cfg.CheckTimeout <= 0 ||
		(cfg.Buyers == 0 && (cfg.Rate <= 0 || cfg.Duration <= 0)) || (cfg.Buyers < 0) {
		return cfg, errors.New("loadtest: -buyers (or -rate and -duration), -stock, -products, -timeout and -check-timeout must be positive")
	}
	if _, err := cfg.withDefaults(); err != nil {
		return cfg, err
	}
	return cfg, nil
}
