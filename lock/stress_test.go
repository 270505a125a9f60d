package lock_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// handOffStress has procs processes with goroutines goroutines each take
// and release one lock rounds times apiece (holds of 0 to 200 µs, and a
// 300 µs pause after every fifth release), with a re-check interval of
// recheck, and returns the longest wait for the lock. Every hand-off must
// come from a release (a grant message, a reply, or a hand-off in memory):
// a waiter that was missed is served only by its re-check, and waits about
// that long.
func handOffStress(t *testing.T, procs, goroutines, rounds int, recheck time.Duration) (time.Duration, error) {
	srv := redistest.Start(t)
	opts := lock.Options{RecheckInterval: recheck, WaitTimeout: 4 * recheck}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		longest time.Duration
		errs    []error
	)
	for p := range procs {
		l := newLocker(t, srv, opts)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					start := time.Now()
					lk, err := l.Acquire(context.Background(), "stress")
					wait := time.Since(start)
					if err == nil {
						busy(time.Duration(rand.N(200)) * time.Microsecond)
						err = lk.Release(context.Background())
					}
					mu.Lock()
					longest = max(longest, wait)
					if err != nil {
						errs = append(errs, fmt.Errorf("process %d goroutine %d round %d: %w", p, g, i, err))
					}
					mu.Unlock()
					if err != nil {
						return
					}
					if i%5 == 4 {
						busy(300 * time.Microsecond)
					}
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return longest, errs[0]
	}
	return longest, nil
}

var handOffRuns = flag.Int("handoff-runs", 40, "TestNoMissedHandOff: how many runs, each on a new redis-server")

// No hand-off is missed: with the fallback re-check 5 s away, no waiter
// waits anywhere near that long, run after run. A second of slack covers
// a machine slowed down by the race detector and other work: the waits of
// a queue of four goroutines are a few milliseconds. The default 40 runs
// (9,600 hand-offs) catch a miss that happens in one run of 20 with a
// probability of 87%; -handoff-runs 100, the soak, with 99.4%.
func TestNoMissedHandOff(t *testing.T) {
	t.Parallel()
	const recheck = 5 * time.Second
	runs := *handOffRuns
	if testing.Short() {
		runs = 5
	}
	var worst time.Duration
	defer func() { t.Logf("longest wait over %d runs: %v", runs, worst) }()
	for i := range runs {
		// A subtest each, so that each run's server and Lockers are gone
		// before the next starts.
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			longest, err := handOffStress(t, 2, 2, 60, recheck)
			worst = max(worst, longest)
			if err != nil {
				t.Fatal(err)
			}
			if longest > time.Second {
				t.Errorf("a waiter waited %v, with the re-check %v away: a hand-off was missed", longest, recheck)
			}
		})
	}
}
