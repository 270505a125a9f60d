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
