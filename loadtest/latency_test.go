package loadtest

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	got := summarize(samples)
	want := Latency{Count: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := summarize([]time.Duration{7}); got.P50 != 7 || got.P99 != 7 || got.Max != 7 {
		t.Errorf("one sample: got %+v, want every figure 7ns", got)
	}
	if got := summarize(nil); got != (Latency{}) {
		t.Errorf("no samples: got %+v, want zero", got)
	}
}
