package loadtest

import (
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// boundedPacer stops an attack after max hits. Vegeta bounds attacks only by
// duration; stopping through the pacer (rather than a Targeter error) ends the
// attack without an extra error result in the output.
type boundedPacer struct {
	vegeta.Pacer
	max uint64
}

// Pace implements vegeta.Pacer.
func (p boundedPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= p.max {
		return 0, true
	}
	return p.Pacer.Pace(elapsed, hits)
}

// newPacer returns the pacing of cfg (already defaulted): a burst (as fast
// as the workers go, or Buyers evenly over BurstWindow), constant at Rate,
// or linear from Rate to RampTo over Duration; it stops after MaxRequests.
func newPacer(cfg Config) vegeta.Pacer {
	if cfg.Buyers > 0 {
		// A zero Rate is Vegeta's "no pacing": every worker sends at once.
		var burst vegeta.Rate
		if cfg.BurstWindow > 0 {
			burst = vegeta.Rate{Freq: cfg.Buyers, Per: cfg.BurstWindow}
		}
		return boundedPacer{Pacer: burst, max: uint64(cfg.MaxRequests)}
	}
	start := vegeta.Rate{Freq: cfg.Rate, Per: time.Second}
	var p vegeta.Pacer = start
	if cfg.RampTo > 0 && cfg.RampTo != cfg.Rate {
		p = vegeta.LinearPacer{
			StartAt: start,
			Slope:   float64(cfg.RampTo-cfg.Rate) / cfg.Duration.Seconds(),
		}
	}
	return boundedPacer{Pacer: p, max: uint64(cfg.MaxRequests)}
}
