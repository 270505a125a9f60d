package loadtest

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{AdminToken: "x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 1 || cfg.Targets[0] != DefaultTarget || cfg.Stock != DefaultStock || cfg.Rate != DefaultRate ||
		cfg.Duration != DefaultDuration || cfg.Timeout != DefaultTimeout || cfg.Workers != DefaultWorkers ||
		cfg.MaxWorkers != DefaultMaxWorkers {
		t.Errorf("got %+v, want the defaults", cfg)
	}
	if want := DefaultRate * int(DefaultDuration/time.Second); cfg.MaxRequests != want {
		t.Errorf("got max requests %d, want rate x duration = %d", cfg.MaxRequests, want)
	}
	ramp, _ := Config{AdminToken: "x", Rate: 100, RampTo: 300, Duration: 2 * time.Second}.withDefaults()
	if ramp.MaxRequests != 400 {
		t.Errorf("ramp 100 -> 300 over 2s: got max requests %d, want 400", ramp.MaxRequests)
	}
}

func TestConfigBurst(t *testing.T) {
	cfg, err := Config{AdminToken: "x", Buyers: 7000}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxRequests != 7000 || cfg.Workers != MaxBurstWorkers || cfg.MaxWorkers != MaxBurstWorkers || cfg.Rate != 0 || cfg.Duration != 0 {
		t.Errorf("got %+v, want 7000 requests on %d workers, no rate or duration", cfg, MaxBurstWorkers)
	}
	small, _ := Config{AdminToken: "x", Buyers: 30, BurstWindow: time.Second}.withDefaults()
	if small.Workers != 30 || small.Shape() != "burst of 30 buyers over 1s, on up to 30 connections" {
		t.Errorf("got %d workers, shape %q; want one per buyer", small.Workers, small.Shape())
	}
	// Spread over the window: 30 per second, and none after the 30th.
	p := newPacer(small)
	if got := p.Rate(0); got < 29.999 || got > 30.001 {
		t.Errorf("rate over the window: got %v, want 30/s", got)
	}
	if _, stop := p.Pace(0, 30); !stop {
		t.Error("got no stop after 30 buyers")
	}
	// At once: no wait between hits.
	if wait, stop := newPacer(cfg).Pace(0, 100); wait != 0 || stop {
		t.Errorf("burst at once: got wait %v, stop %v; want 0 and false", wait, stop)
	}
}

func TestConfigTargets(t *testing.T) {
	cfg, err := Config{AdminToken: "x", Targets: []string{" http://a:1/ ", "https://lb/shop/"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Targets[0] != "http://a:1" || cfg.Targets[1] != "https://lb/shop" {
		t.Errorf("got %q, want trimmed base URLs", cfg.Targets)
	}
	for _, bad := range []string{"127.0.0.1:8080", "ftp://a", "http://", "http://a/?x=1", "http://a/#f", "http://u:p@a", "::"} {
		_, err := Config{AdminToken: "x", Targets: []string{bad}}.withDefaults()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("target %q: got %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestConfigRefuses(t *testing.T) {
	cases := map[string]Config{
		"token":        {},
		"product id":   {ProductID: -1},
		"stock":        {AdminToken: "x", Stock: -5},
		"rate":         {AdminToken: "x", Rate: -1},
		"ramp":         {AdminToken: "x", RampTo: -1},
		"duration":     {AdminToken: "x", Duration: -time.Second},
		"max requests": {AdminToken: "x", MaxRequests: -1},
		"repeat share": {AdminToken: "x", RepeatShare: 1.5},
		"NaN share":    {AdminToken: "x", RepeatShare: math.NaN()},
		"workers":      {AdminToken: "x", Workers: 10, MaxWorkers: 5},
		"progress":     {AdminToken: "x", ProgressMode: 42},
		"buyers":       {AdminToken: "x", Buyers: -1},
		"burst rate":   {AdminToken: "x", Buyers: 10, Rate: 5},
		"burst length": {AdminToken: "x", Buyers: 10, Duration: time.Second},
		"window alone": {AdminToken: "x", BurstWindow: time.Second},
		"window < 0":   {AdminToken: "x", Buyers: 10, BurstWindow: -time.Second},
	}
	for name, cfg := range cases {
		if _, err := cfg.withDefaults(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", name, err)
		}
	}
	// An existing product needs no token.
	if _, err := (Config{ProductID: 3}).withDefaults(); err != nil {
		t.Errorf("existing product without token: got %v, want nil", err)
	}
	_, err := Config{}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "ADMIN_TOKEN") {
		t.Errorf("got %v, want a message that says where the token comes from", err)
	}
}
