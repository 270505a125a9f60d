package demo

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/seckill-ref/seckill/internal/app"
)

// A replica process that dies before it is ready is reported with what it
// wrote, and not retried: only a port taken meanwhile is.
func TestReplicaProcessThatExitsIsReported(t *testing.T) {
	starts := 0
	boom := func() (*exec.Cmd, error) {
		starts++
		return exec.Command("sh", "-c", "echo 'seckill: boom' >&2; exit 3"), nil
	}
	_, err := startProcess(context.Background(), boom, app.DefaultConfig(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "seckill: boom") {
		t.Errorf("got %v, want the early exit with the process's output", err)
	}
	if starts != 1 {
		t.Errorf("started %d times, want 1", starts)
	}
}

// lineLogger logs each whole line once, however the writes split it: WARN
// records as warnings, anything else as errors.
func TestLineLoggerSplitsLines(t *testing.T) {
	var got []string
	h := &recordHandler{add: func(r slog.Record) {
		r.Attrs(func(a slog.Attr) bool {
			got = append(got, r.Level.String()+" "+a.Value.String())
			return true
		})
	}}
	l := &lineLogger{logger: slog.New(h)}
	for _, w := range []string{"time=1 level=WARN msg=a\ntime=2 le", "vel=ERROR msg=b\n\npanic: x", "\n"} {
		if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	want := []string{"WARN time=1 level=WARN msg=a", "ERROR time=2 level=ERROR msg=b", "ERROR panic: x"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}

type recordHandler struct{ add func(slog.Record) }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error { h.add(r); return nil }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h *recordHandler) WithGroup(string) slog.Handler                 { return h }
