package loadtest

import (
	"slices"
	"time"
)

// Latency summarises a set of request latencies. Percentiles are exact
// (nearest rank over every sample): a run holds at most MaxRequests samples,
// so there is no need for an estimator.
type Latency struct {
	Count int
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// summarize returns the Latency of samples, sorting them in place.
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	return Latency{
		Count: len(samples),
		P50:   percentile(samples, 50),
		P90:   percentile(samples, 90),
		P99:   percentile(samples, 99),
		Max:   samples[len(samples)-1],
	}
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// sample with at least p% of the samples at or below it.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}
