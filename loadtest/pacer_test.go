package loadtest

import (
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestPacerStopsAtMaxRequests(t *testing.T) {
	p := newPacer(Config{Rate: 100, Duration: time.Second, MaxRequests: 5})
	for hits := range uint64(5) {
		if _, stop := p.Pace(0, hits); stop {
			t.Fatalf("stopped after %d hits, want 5", hits)
		}
	}
	if _, stop := p.Pace(0, 5); !stop {
		t.Error("got no stop after 5 hits, want stop")
	}
}

func TestPacerRamp(t *testing.T) {
	p := newPacer(Config{Rate: 100, RampTo: 300, Duration: 2 * time.Second, MaxRequests: 1000})
	if _, ok := p.(boundedPacer).Pacer.(vegeta.LinearPacer); !ok {
		t.Fatalf("got %T, want a LinearPacer inside", p.(boundedPacer).Pacer)
	}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 100}, {time.Second, 200}, {2 * time.Second, 300}} {
		if got := p.Rate(tc.at); got < tc.want-0.001 || got > tc.want+0.001 {
			t.Errorf("rate at %v: got %v, want %v", tc.at, got, tc.want)
		}
	}
	constant := newPacer(Config{Rate: 100, Duration: time.Second, MaxRequests: 10})
	if _, ok := constant.(boundedPacer).Pacer.(vegeta.ConstantPacer); !ok {
		t.Errorf("got %T without a ramp, want a ConstantPacer", constant.(boundedPacer).Pacer)
	}
}
