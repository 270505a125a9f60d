package lease

import (
	"math/rand/v2"
	"time"
)

// Jitter spreads d by ±25%, so that processes do not act in step.
func Jitter(d time.Duration) time.Duration {
	return d - d/4 + rand.N(d/2+1)
}

// Backoff is the wait after the n-th failure in a row: doubling from 5 ms,
// capped at limit, jittered.
func Backoff(n int, limit time.Duration) time.Duration {
	d := 5 * time.Millisecond << min(max(n-1, 0), 10)
	return Jitter(min(d, limit))
}
