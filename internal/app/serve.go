// Package app wires the service together: configuration from flags and the
// environment, the store, the lock in its configured mode, the domain
// service, the HTTP handlers, logging, and graceful shutdown. Main is the
// "seckill serve" command; NewServer builds a replica for programs that run
// several in one process (the demo, the tests).
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

// Main is the "seckill serve" command: it parses args (without the command
// name) and the environment, read only through getenv, then runs one
// replica until SIGINT or SIGTERM (or ctx ends) and shuts down: stop
// accepting, finish in-flight requests (they release their locks), close
// the Locker, Redis and the database. Logs go to stderr, the random admin
// token to stdout. It returns nil after a clean shutdown and after -h.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := ParseConfig("serve", args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
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
	lockMode := string(cfg.Lock) // the lock design's; the others take none
	if cfg.Design != DesignLock {
		lockMode = "-"
	}
	logger.Info("serving", "addr", ln.Addr().String(), "design", cfg.Design, "lock", lockMode, "redis", cfg.redisTarget(),
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
