package demo

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// replicaLogs is where the replicas log: warnings and errors only, into
// the -log file or nowhere, and counted either way. A sale with faults logs
// every 503 and every lost lease, hundreds of lines that would bury the
// report and its live progress line on a terminal; the count says they
// happened, and -log keeps them for reading.
type replicaLogs struct {
	logger      *slog.Logger
	warns, errs atomic.Int64
	path        string   // the -log file, or ""
	file        *os.File // open while path is set
}

// openReplicaLogs opens path for appending, or discards when path is "".
func openReplicaLogs(path string) (*replicaLogs, error) {
	l := &replicaLogs{path: path}
	next := slog.DiscardHandler
	if path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open the log file: %w", err)
		}
		l.file = f
		next = slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn})
	}
	l.logger = slog.New(&countingHandler{next: next, logs: l})
	return l, nil
}

// summary is one line on what the replicas logged, or "" if nothing.
func (l *replicaLogs) summary() string {
	w, e := l.warns.Load(), l.errs.Load()
	if w+e == 0 {
		return ""
	}
	where := "-log FILE keeps them"
	if l.path != "" {
		where = "they are in " + l.path
	}
	return fmt.Sprintf("the replicas logged %d warning(s) and %d error(s); %s", w, e, where)
}

// Close closes the log file, if any.
func (l *replicaLogs) Close() error {
	if l.file == nil {
		return nil
	}
	return l.file.Close()
}

// countingHandler counts warnings and errors and passes them on.
type countingHandler struct {
	next slog.Handler
	logs *replicaLogs
}

func (h *countingHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.logs.errs.Add(1)
	} else {
		h.logs.warns.Add(1)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &countingHandler{next: h.next.WithAttrs(attrs), logs: h.logs}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{next: h.next.WithGroup(name), logs: h.logs}
}

// redisLog passes go-redis's log lines on to a logger, as warnings: they
// report connection trouble.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
