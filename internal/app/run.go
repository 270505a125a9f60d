// Package app wires the service together: configuration from flags and the
// environment, the store, the lock in its configured mode, the domain
// service, the HTTP handlers, logging, and graceful shutdown. It is the
// only package that knows every other one; main.go only calls Run.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/store"
)

// Command is one subcommand of the program. Those defined outside this
// package are handed to Run by main.go: the demo builds replicas with
// NewServer, so it imports app, and app's own table cannot name it without
// an import cycle.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

// commands lists the subcommands; the first is the default.
func commands() []Command {
	return []Command{
		{"serve", "run the HTTP API (the default)", serve},
		{"loadtest", "run a flash sale against running replicas and check that nothing is oversold", loadtestCmd},
	}
}

// Run runs the program with its command-line arguments (without the
// program name). The first argument names a subcommand; without one, or
// when it starts with "-", it is serve. It reads the environment only
// through getenv and writes only to stdout and stderr, so that a test can
// run it like a process. It returns nil after a clean shutdown and after
// -h. extra adds the subcommands main.go wires in, after the built-in ones.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, extra ...Command) error {
	cmds := append(commands(), extra...)
	cmd := cmds[0]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name := args[0]
		args = args[1:]
		if name == "help" {
			usage(stdout, cmds)
			return nil
		}
		found := false
		for _, c := range cmds {
			if c.Name == name {
				cmd, found = c, true
			}
		}
		if !found {
			usage(stderr, cmds)
			return fmt.Errorf("unknown command %q", name)
		}
	}
	err := cmd.Run(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func usage(w io.Writer, cmds []Command) {
	fmt.Fprintln(w, "usage: seckill [command] [flags]\n\ncommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun seckill <command> -h for a command's flags.")
}

// serve runs one replica until SIGINT or SIGTERM (or ctx ends), then shuts
// down: stop accepting, finish in-flight requests (they release their
// locks), close the Locker, Redis and the database.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := ParseConfig("serve", args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	// go-redis logs (failed dials, mostly, and Sentinel's switches of
	// master) through a process-wide logger; serve owns the process, so it
	// routes them through slog too, once the server has started. Until
	// then, a failure is NewServer's error, one line that go-redis's
	// retries would only bury.
	redis.SetLogger(redisLogger{slog.New(slog.DiscardHandler)})
	if cfg.AdminToken == "" {
		cfg.AdminToken = rand.Text()
		fmt.Fprintf(stdout, "admin token: %s\n(random, shown once; set ADMIN_TOKEN or -admin-token to choose it)\n", cfg.AdminToken)
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := NewServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer srv.Close()
	redis.SetLogger(redisLogger{logger})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	logger.Info("serving", "addr", ln.Addr().String(), "lock", cfg.Lock, "redis", cfg.redisTarget(),
		"database", store.Redact(cfg.Database), "lock_ttl", cfg.LockTTL, "lock_wait", cfg.LockWait, "lock_renew", cfg.LockRenew,
		"lock_wait_replicas", cfg.LockWaitReplicas, "batch_max", cfg.BatchMax, "queue_max", cfg.QueueMax)
	if cfg.ChaosPause > 0 {
		logger.Warn("chaos: lock holders pause inside the critical section", "pause", cfg.ChaosPause, "probability", cfg.ChaosProb)
	}
	serveErr := srv.Serve(ctx, ln)
	closeErr := srv.Close()
	logger.Info("stopped")
	return errors.Join(serveErr, closeErr)
}

// redisLogger writes go-redis's log lines through slog: as warnings, since
// they report connection trouble, except the Sentinel client's news of
// which master it uses, which is information.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "sentinel: ") && !strings.Contains(msg, "failed") {
		level = slog.LevelInfo
	}
	l.log.Log(ctx, level, "redis: "+msg)
}
