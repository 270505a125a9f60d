// Package demo is "seckill demo": the whole system on one machine, in one
// command, with nothing installed but Go. It starts Redis (a redis-server
// child when one is on PATH, otherwise an embedded miniredis), a temporary
// SQLite file and several replicas of the service on loopback ports sharing
// them, runs the load test against every replica, prints the report and
// the verdict, and removes everything it started, also after a Ctrl-C or an
// error. With -matrix it runs a short sale per lock mode and fault and
// prints one table: the project's claim, and the control groups that show
// the checker would have caught a failure, in one screen.
package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// Exit statuses, as loadtest's: the CI scripts read them.
const (
	exitOK    = loadtest.ExitOK
	exitFail  = loadtest.ExitFail
	exitError = loadtest.ExitError
)

// Command is the "seckill demo" command, which starts replica processes
// with command (nil: every replica runs in this process). It runs the demo
// with args (without the command name) and returns the exit status, as
// loadtest.Main does, after saying why when it is not 0. It reads the
// environment only through getenv; the report goes to stdout, problems and
// the replicas' warnings to stderr.
func Command(command ReplicaCommand) func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
		return run(ctx, command, args, getenv, stdout, stderr)
	}
}

func run(ctx context.Context, command ReplicaCommand, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		if !errors.Is(err, errFlagParse) {
			fmt.Fprintf(stderr, "demo: %v\nRun 'seckill demo -h' for usage.\n", err)
		}
		return exitError
	}
	o.command = command
	// Until run returns, these signals stop the sale but not the clean-up:
	// the redis-server child sits in its own process group and would
	// outlive a demo killed by a default handler. SIGPIPE ("seckill demo |
	// head") would kill us the same way, and cannot stop the sale instead:
	// the in-process replicas' sockets raise it too, whenever a peer has
	// reset a connection (the matrix's network faults do). So it is
	// ignored, and a write to our own output that fails with EPIPE stops
	// the sale (cutOutput).
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cut := context.WithCancel(ctx)
	defer cut()
	stdout, stderr = watchOutput(stdout, cut), watchOutput(stderr, cut)

	logs, err := openReplicaLogs(o.logFile)
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitError
	}
	defer logs.Close()
	// go-redis logs (failed dials, mostly) through one process-wide
	// logger: the in-process replicas' trouble, which belongs with their
	// warnings, not on the terminal.
	redis.SetLogger(redisLog{logs.logger})
	defer redis.SetLogger(redisLog{slog.New(slog.DiscardHandler)})

	var rds *redisHandle
	if o.needsRedis() {
		if rds, err = startRedis(ctx, o.redis, stderr); err != nil {
			fmt.Fprintf(stderr, "demo: %v\n", err)
			return exitError
		}
	}
	var code int
	if o.matrix {
		code = runMatrix(ctx, o, rds, logs.logger, stdout, stderr)
	} else {
		code = runSale(ctx, o, rds, logs, stdout, stderr)
	}
	if rds != nil {
		if err := rds.Close(); err != nil {
			fmt.Fprintf(stderr, "demo: stop Redis: %v\n", err)
			code = exitError
		}
	}
	return code
}

// runSale is the demo without -matrix: one sale with the flags' settings.
// rds is nil when the lock mode needs no Redis. A sale that was to show a
// fault or a broken mode's oversell and did not (the race it depends on
// did not happen) runs again on fresh replicas, maxRowAttempts sales at
// most, as a row of the matrix does: its fault must have happened for its
// verdict to mean anything.
func runSale(ctx context.Context, o options, rds *redisHandle, logs *replicaLogs, stdout, stderr io.Writer) int {
	cfg := o.svc
	cfg.AdminToken = rand.Text()
	if rds != nil {
		cfg.RedisAddr = rds.addr
		fmt.Fprintf(stdout, "demo: Redis: %s\n", rds.describe())
	} else if cfg.Design == app.DesignLock {
		fmt.Fprintf(stdout, "demo: no Redis: lock mode %s does not use it\n", cfg.Lock)
	} else {
		fmt.Fprintf(stdout, "demo: no Redis: design %s does not use it\n", cfg.Design)
	}
	for attempt := 1; ; attempt++ {
		code, missing := saleOnce(ctx, o, cfg, logs, stdout, stderr, attempt < maxRowAttempts)
		if missing == "" {
			return code
		}
		if attempt == maxRowAttempts {
			fmt.Fprintf(stdout, "demo: FAULT NOT INJECTED in %d sales: %s\n", attempt, missing)
			return exitFail
		}
		fmt.Fprintf(stdout, "demo: %s; running the sale again on fresh replicas (sale %d of at most %d)\n", missing, attempt+1, maxRowAttempts)
	}
}

// saleOnce runs one sale on new replicas. missing is why the sale does
// not show what it was to show (its fault, or the broken mode's
// oversell), "" when it does or was to show nothing. When again is set,
// such a sale returns without a verdict, to be run again; otherwise it
// prints its verdict and may keep its replicas up (-keep).
func saleOnce(ctx context.Context, o options, cfg app.Config, logs *replicaLogs, stdout, stderr io.Writer, again bool) (code int, missing string) {
	c, err := startCluster(ctx, o.replicas, cfg, o.command, logs.logger)
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitError, ""
	}
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintf(stderr, "demo: clean up: %v\n", err)
		}
	}()
	fmt.Fprintf(stdout, "demo: %d replica(s) %s sharing %s\n", len(c.urls), strings.Join(c.urls, " "), c.db)
	if len(c.processes) > 0 {
		why := "" // -lock none: nothing is shared but Redis and the database
		if cfg.Lock == app.LockLocal {
			why = ": the local lock is one mutex per process"
		}
		fmt.Fprintf(stdout, "demo: the replicas run as processes of their own (pids %s)%s\n", c.pids(), why)
	}
	fmt.Fprintf(stdout, "demo: %s\n", describeService(cfg))
	fmt.Fprintf(stdout, "demo: dashboard: %s/dashboard (any replica; -keep keeps it up after the sale)\n", c.urls[0])

	sale := o.sale
	sale.Targets, sale.AdminToken = c.urls, cfg.AdminToken
	rep, err := loadtest.Run(ctx, sale, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitError, ""
	}
	switch {
	case cfg.Design == app.DesignLock && cfg.Lock == app.LockRedis:
		rejected, lost := c.counters()
		fmt.Fprintf(stdout, "demo: the replicas counted %d fence rejection(s) and %d lost lease(s)\n", rejected, lost)
		if expiresLeases(cfg) && lost == 0 {
			missing = fmt.Sprintf("holders pause %v with probability %g, past the %v lease with renewal off, yet no lease was lost",
				cfg.ChaosPause, cfg.ChaosProb, cfg.LockTTL)
		}
	case cfg.Design == app.DesignCounter || cfg.Design == app.DesignCounterAsync:
		ev := c.counterEvidence()
		fmt.Fprintf(stdout, "demo: the replicas built %d stock counter(s) from the database and took over %d queued order(s)\n", ev.builds, ev.claimed)
	}
	if s := logs.summary(); s != "" {
		fmt.Fprintf(stdout, "demo: %s\n", s)
	}
	if r := rep.Reservations; r != nil {
		fmt.Fprintf(stdout, "demo: %s\n", r.LagLine())
	}
	if sale.ExpectOversell && !rep.OK() && missing == "" {
		missing = "no oversell and no violation in a sale of a mode expected to oversell: the race it depends on did not happen"
	}
	if ctx.Err() != nil {
		missing = "" // an interrupted sale shows what it showed
	}
	if missing != "" && again {
		return exitFail, missing
	}
	fmt.Fprintf(stdout, "demo: %s\n", rep.Verdict())
	code = exitOK
	if !rep.OK() || missing != "" {
		code = exitFail
	}
	if o.keep && ctx.Err() == nil {
		fmt.Fprintf(stdout, "demo: keeping Redis and the replicas up: the dashboard is at %s/dashboard; Ctrl-C to stop\n", c.urls[0])
		<-ctx.Done()
	}
	return code, missing
}

// describeService says what guards the sale, in a line.
func describeService(cfg app.Config) string {
	design := ""
	switch cfg.Design {
	case app.DesignConditional:
		design = "design conditional: one transaction per purchase, UPDATE ... WHERE stock > 0 then the order's insert; no lock, no Redis"
	case app.DesignCounter:
		design = "design redis-counter: a Lua script takes from the stock counter in Redis, then the order is inserted before the answer; no lock"
	case app.DesignCounterAsync:
		design = "design redis-counter-async: a Lua script takes from the stock counter in Redis and queues the order; 201 at once, each replica's writer inserts the queued orders; no lock"
	}
	if design != "" {
		if cfg.PayWindow > 0 {
			design += "; " + describeLife(cfg)
		}
		return design
	}
	var b strings.Builder
	fmt.Fprintf(&b, "lock %s", cfg.Lock)
	if cfg.Lock == app.LockRedis {
		renew := "on"
		if !cfg.LockRenew {
			renew = "off"
		}
		fence := "fencing on"
		if cfg.UnsafeNoFence {
			fence = "FENCING OFF (unsafe)"
		}
		fmt.Fprintf(&b, " (TTL %v, renewal %s, %s)", cfg.LockTTL, renew, fence)
		if !cfg.UnsafeNoFence {
			fmt.Fprintf(&b, ", up to %d purchases per lock hold", cfg.BatchMax)
		}
	}
	fmt.Fprintf(&b, ", wait up to %v", cfg.LockWait)
	if cfg.ChaosPause > 0 && cfg.ChaosProb > 0 {
		fmt.Fprintf(&b, "; chaos: holders pause %v with probability %g", cfg.ChaosPause, cfg.ChaosProb)
	}
	if cfg.PayWindow > 0 {
		b.WriteString("; " + describeLife(cfg))
	}
	return b.String()
}

// describeLife says what a purchase reserves and who expires it.
func describeLife(cfg app.Config) string {
	s := fmt.Sprintf("payment window %v, each replica expires due orders every %v", cfg.PayWindow, cfg.ExpiryEvery())
	switch cfg.UnsafeExpiry {
	case "unlocked":
		s += ", UNLOCKED (unsafe): units go back outside the lock and the fence"
	case "unchecked":
		s += ", UNCHECKED (unsafe): due orders expire whatever their state"
	}
	switch {
	case cfg.ChaosExpiryPause <= 0 || cfg.ChaosProb <= 0:
	case cfg.Design == app.DesignConditional:
		s += ", no expiry pause (the conditional design has no step between its read and its write)"
	case cfg.Design == app.DesignCounter:
		s += fmt.Sprintf(", cancels and expiries pausing %v between the database's return of units and the counter's", cfg.ChaosExpiryPause)
	default:
		s += fmt.Sprintf(", pausing %v between its read and its write", cfg.ChaosExpiryPause)
	}
	if cfg.UnsafePayLate {
		s += "; payments after the window ACCEPTED (unsafe)"
	}
	return s
}

// watchOutput is w, which calls cut when a write fails with EPIPE:
// whoever read the output has gone, as SIGPIPE would have said. A w with a
// file descriptor keeps it, for the progress line's terminal check.
func watchOutput(w io.Writer, cut context.CancelFunc) io.Writer {
	o := cutOutput{w, cut}
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		return cutFile{o, f}
	}
	return o
}

type cutOutput struct {
	w   io.Writer
	cut context.CancelFunc
}

type cutFile struct {
	cutOutput
	f interface{ Fd() uintptr }
}

func (o cutFile) Fd() uintptr { return o.f.Fd() }

func (o cutOutput) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		o.cut()
	}
	return n, err
}
