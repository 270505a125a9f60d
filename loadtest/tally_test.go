package loadtest

import (
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestTallySellOutTime(t *testing.T) {
	start := time.Now()
	tl := newTally(start)
	at := func(code uint16, body string, end time.Duration) *vegeta.Result {
		return &vegeta.Result{Code: code, Timestamp: start, Latency: end, Body: []byte(body), URL: "x#user=lt-1-0"}
	}
	// Out of order on purpose: results arrive in completion order, not sent order.
	tl.add(at(409, `{"error":"sold_out"}`, 50*time.Millisecond))
	tl.add(at(201, `{}`, 30*time.Millisecond))
	tl.add(at(409, `{"error":"sold_out"}`, 20*time.Millisecond))
	tl.add(at(409, `{"error":"sold_out"}`, 40*time.Millisecond))
	if tl.lastCreated != 30*time.Millisecond || tl.soldOutAt() != 40*time.Millisecond || tl.end != 50*time.Millisecond {
		t.Errorf("got last 201 %v, sold out %v, end %v; want 30ms, 40ms, 50ms", tl.lastCreated, tl.soldOutAt(), tl.end)
	}
	if tl.live.created.Load() != 1 || tl.live.conflict.Load() != 3 || tl.live.done.Load() != 4 {
		t.Errorf("got live counts %d/%d/%d, want 1 created, 3 conflicts, 4 done",
			tl.live.created.Load(), tl.live.conflict.Load(), tl.live.done.Load())
	}
}
