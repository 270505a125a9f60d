// Package contention measures a lock under contention for the benchmarks:
// many goroutines, spread over several instances (processes, each with its
// own Redis client), fight over one hot key, each holding it for a fixed
// busy-wait. Throughput alone lies (a polling lock re-taken by the
// goroutine that just released looks fast while others starve), so it also
// measures waits, timeouts, how often the lock changed hands, and how long
// a hand-over to another goroutine took.
package contention

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Lock is what a benchmarked lock offers: one acquisition that waits as
// long as the lock's own wait allows.
type Lock interface {
	// Acquire returns ok false when the wait ran out, and release to call
	// once the critical section is over.
	Acquire(ctx context.Context) (release func(), ok bool, err error)
}

// Result is what one run observed.
type Result struct {
	Elapsed  time.Duration
	Hold     time.Duration
	Holds    int             // critical sections run
	Timeouts int             // acquisitions whose wait ran out
	Waits    []time.Duration // of the successful acquisitions
	Switches int             // consecutive holds by different goroutines
	Gaps     []time.Duration // previous holder leaves -> another enters
}

type holding struct {
	g            int
	enter, leave time.Time
}

// Run makes attempts acquisitions in total, by goroutines goroutines spread
// round-robin over locks, each holding the lock for hold (busy-waiting, as
// CPU-bound work would). It fails if two goroutines ever held the lock at
// once.
func Run(ctx context.Context, locks []Lock, goroutines, attempts int, hold time.Duration) (Result, error) {
	var (
		next     atomic.Int64
		timeouts atomic.Int64
		mu       sync.Mutex
		holds    = make([]holding, 0, attempts)
		waits    = make([][]time.Duration, goroutines)
		wg       sync.WaitGroup
		failed   atomic.Value
	)
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := locks[g%len(locks)]
			for next.Add(1) <= int64(attempts) {
				t0 := time.Now()
				release, ok, err := l.Acquire(ctx)
				if err != nil {
					failed.Store(err)
					return
				}
				if !ok {
					timeouts.Add(1)
					continue
				}
				enter := time.Now()
				waits[g] = append(waits[g], enter.Sub(t0))
				for time.Since(enter) < hold {
				}
				leave := time.Now()
				mu.Lock()
				holds = append(holds, holding{g, enter, leave})
				mu.Unlock()
				release()
			}
		}()
	}
	wg.Wait()
	r := Result{Elapsed: time.Since(start), Hold: hold, Holds: len(holds), Timeouts: int(timeouts.Load()), Waits: slices.Concat(waits...)}
	if err, _ := failed.Load().(error); err != nil {
		return r, err
	}
	slices.SortFunc(holds, func(a, b holding) int { return a.enter.Compare(b.enter) })
	for i := 1; i < len(holds); i++ {
		if holds[i].enter.Before(holds[i-1].leave) {
			return r, fmt.Errorf("two holders at once: goroutines %d and %d", holds[i-1].g, holds[i].g)
		}
		if holds[i].g != holds[i-1].g {
			r.Switches++
			r.Gaps = append(r.Gaps, holds[i].enter.Sub(holds[i-1].leave))
		}
	}
	return r, nil
}

// Report adds r's figures to b's output: acquisitions per second,
// efficiency (the share of time the lock was doing useful work:
// acquisitions/s x hold), wait p50/p99/max, timeouts, the share of
// acquisitions that changed owner, and the p50 owner-switch gap.
func Report(b *testing.B, r Result) {
	perSec := float64(r.Holds) / r.Elapsed.Seconds()
	b.ReportMetric(perSec, "acq/s")
	b.ReportMetric(100*perSec*r.Hold.Seconds(), "eff%")
	b.ReportMetric(ms(Percentile(r.Waits, 50)), "wait-p50-ms")
	b.ReportMetric(ms(Percentile(r.Waits, 99)), "wait-p99-ms")
	b.ReportMetric(ms(Percentile(r.Waits, 100)), "wait-max-ms")
	b.ReportMetric(float64(r.Timeouts), "timeouts")
	if r.Holds > 1 {
		b.ReportMetric(100*float64(r.Switches)/float64(r.Holds-1), "switch%")
	}
	b.ReportMetric(float64(Percentile(r.Gaps, 50).Microseconds()), "gap-p50-µs")
}

// Percentile is the p-th percentile of d (p = 100: the maximum).
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
