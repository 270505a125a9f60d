package demo

import (
	"context"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
)

// The matrix's fault: holders outlive their leases. The lease is 200 ms
// with renewal off; every holder works 2 ms inside the critical section,
// and the first holder of the sale, then one in five of the others, stall
// past the lease until the next holder is inside too (stallHook). The
// probability below 1 lets the sale move between stalls; the first stall
// is certain, so that every sale has one, however few lock holds a fast
// machine needs to sell the stock. The rows without a fault inject
// nothing: the burst alone is what makes the broken modes oversell.
const (
	faultWork     = 2 * time.Millisecond
	faultTTL      = 200 * time.Millisecond
	faultMaxStall = time.Second
	faultProb     = 0.2
)

// stallHook is the lease-expiry rows' chaos hook, shared by the replicas
// of one sale (they run in this process). Every holder works for work;
// the first holder, and each later one with probability prob, then
// stalls until another holder reaches this point, or for maxStall at
// most. With renewal off, another holder gets in only once the stalled
// one's lease has run out, so a stall that an arrival ends is the fault
// itself, made certain rather than timed: the newcomer is past its claim
// and its read, and the stalled holder writes after it. maxStall, longer
// than the lease, bounds a stall nobody ends (the sale was over); that
// holder's lease runs out all the same.
type stallHook struct {
	work, maxStall time.Duration
	prob           float64

	mu       sync.Mutex
	started  bool            // the first holder has come
	stalled  []chan struct{} // the holders stalled now; the next arrival closes them
	overlaps int64           // stalls that an arrival ended
}

func newStallHook(work, maxStall time.Duration, prob float64) *stallHook {
	return &stallHook{work: work, maxStall: maxStall, prob: prob}
}

// run is the hook: it returns when the holder may write. Like the
// service's own hook, it ends with the request.
func (h *stallHook) run(ctx context.Context) {
	if !wait(ctx, h.work, nil) {
		return
	}
	h.mu.Lock()
	for _, c := range h.stalled {
		close(c)
	}
	h.overlaps += int64(len(h.stalled))
	h.stalled = nil
	var mine chan struct{}
	if !h.started || mrand.Float64() < h.prob {
		mine = make(chan struct{})
		h.stalled = append(h.stalled, mine)
	}
	h.started = true
	h.mu.Unlock()
	if mine == nil {
		return
	}
	if !wait(ctx, h.maxStall, mine) {
		h.mu.Lock()
		for i, c := range h.stalled {
			if c == mine {
				h.stalled = append(h.stalled[:i], h.stalled[i+1:]...)
				break
			}
		}
		h.mu.Unlock()
	}
}

// overlapCount is how many stalls another holder's arrival has ended.
func (h *stallHook) overlapCount() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.overlaps
}

// wait waits for d, for done to close, or for ctx to end; it reports
// whether done closed, or, with a nil done, whether d passed.
func wait(ctx context.Context, d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return done == nil
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// expiresLeases reports whether cfg injects the lease-expiry fault into a
// plain demo sale: the Redis lock with renewal off, and a chaos pause, at
// some probability, at least as long as the lease. A holder that pauses
// then outlives its lease, and the replicas count a lost lease; a sale
// that counted none did not show the fault.
func expiresLeases(cfg app.Config) bool {
	return cfg.Lock == app.LockRedis && !cfg.LockRenew && cfg.ChaosProb > 0 && cfg.ChaosPause > 0 && cfg.ChaosPause >= cfg.LockTTL
}
