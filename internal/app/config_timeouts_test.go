package app_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
)

func TestHTTPTimeoutDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := app.ParseConfig("serve", nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReadTimeout != 10*time.Second || cfg.WriteTimeout != 0 || cfg.IdleTimeout != 120*time.Second {
		t.Errorf("got read %v write %v idle %v, want 10s, 0 (derived), 2m0s", cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout)
	}
	// Derived: read timeout 10s + lock wait 2s + 5s.
	if got := cfg.HTTPWriteTimeout(); got != 17*time.Second {
		t.Errorf("derived write timeout: got %v, want 17s", got)
	}
	// It follows the waits it must outlast.
	cfg, err = app.ParseConfig("serve", []string{"-lock-wait", "30s", "-chaos-pause", "1s"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.HTTPWriteTimeout(); got != 46*time.Second {
		t.Errorf("derived write timeout with a 30s lock wait and a 1s chaos pause: got %v, want 46s", got)
	}
}

func TestHTTPTimeoutsFromEnvAndFlags(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"READ_TIMEOUT": "5s", "WRITE_TIMEOUT": "30s", "IDLE_TIMEOUT": "90s"})
	cfg, err := app.ParseConfig("serve", nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReadTimeout != 5*time.Second || cfg.WriteTimeout != 30*time.Second || cfg.IdleTimeout != 90*time.Second ||
		cfg.HTTPWriteTimeout() != 30*time.Second {
		t.Errorf("from the environment: got read %v write %v idle %v", cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout)
	}
	cfg, err = app.ParseConfig("serve", []string{"-read-timeout=1s", "-write-timeout=3s", "-idle-timeout=4s"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReadTimeout != time.Second || cfg.WriteTimeout != 3*time.Second || cfg.IdleTimeout != 4*time.Second {
		t.Errorf("flags did not override: got read %v write %v idle %v", cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout)
	}
}

func TestHTTPTimeoutErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"READ_TIMEOUT": "later"}, nil, "READ_TIMEOUT"},
		{nil, []string{"-read-timeout", "0s"}, "read timeout"},
		{nil, []string{"-idle-timeout", "-1s"}, "idle timeout"},
		{nil, []string{"-write-timeout", "-1s"}, "write timeout"},
		// Not longer than the lock wait: a buyer waiting its turn would
		// lose the answer.
		{nil, []string{"-write-timeout", "2s"}, "write timeout 2s: must be longer than a request's longest wait, 2s"},
		{map[string]string{"LOCK_WAIT": "5s", "WRITE_TIMEOUT": "3s"}, nil, "write timeout 3s"},
		{nil, []string{"-lock-wait", "2s", "-chaos-pause", "1s", "-write-timeout", "3s"}, "longest wait, 3s"},
	} {
		_, err := app.ParseConfig("serve", tt.args, envOf(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("env %v args %v: got %v, want an error containing %q", tt.env, tt.args, err, tt.want)
		}
	}
	// Just longer than the waits is accepted.
	if _, err := app.ParseConfig("serve", []string{"-lock-wait", "2s", "-write-timeout", "2100ms"}, envOf(nil), io.Discard); err != nil {
		t.Errorf("write timeout 2.1s with a 2s lock wait: %v", err)
	}
}
