package demo

import (
	"context"
	mrand "math/rand/v2"
	"slices"
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
// faultMaxStall bounds only a stall nobody ends, and is long enough for a
// loaded machine's next holder to come: a stall it ends is the row's
// fault, and a row whose every stall ran out shows none.
const (
	faultWork     = 2 * time.Millisecond
	faultTTL      = 200 * time.Millisecond
	faultMaxStall = 3 * time.Second
	faultProb     = 0.2
)

// stallHook is the lease-expiry rows' chaos hook, shared by the replicas
// of one sale (they run in this process). Every holder works for work;
// the first holder, and each later one with probability prob, then
// stalls until another holder of one of its products reaches this point,
// or for maxStall at most. With renewal off, another holder of a product
// gets in only once the stalled one's lease has run out, so a stall that
// such an arrival ends is the fault itself, made certain rather than
// timed: the newcomer is past its claim and its read, and the stalled
// holder writes after it. maxStall, longer than the lease, bounds a stall
// nobody ends (the sale was over, or a product nobody else buys); that
// holder's lease runs out all the same.
type stallHook struct {
	work, maxStall time.Duration
	prob           float64

	mu       sync.Mutex
	started  bool              // the first holder has come
	stalled  map[int64][]*stop // by product: the holders stalled now; the next holder of it ends their stall
	overlaps int64             // stalls that an arrival ended
}

// stop is one stall: it ends, once, whichever of its products' holders
// comes first.
type stop struct {
	products []int64
	done     chan struct{}
}

// end ends s and takes it off every product's list; the caller holds h.mu.
func (h *stallHook) end(s *stop) {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	for _, p := range s.products {
		h.stalled[p] = slices.DeleteFunc(h.stalled[p], func(x *stop) bool { return x == s })
		if len(h.stalled[p]) == 0 {
			delete(h.stalled, p)
		}
	}
}

func newStallHook(work, maxStall time.Duration, prob float64) *stallHook {
	return &stallHook{work: work, maxStall: maxStall, prob: prob, stalled: map[int64][]*stop{}}
}

// run is the hook: it returns when the holder may write. Like the
// service's own hook, it ends with the request.
func (h *stallHook) run(ctx context.Context, products []int64) {
	if !wait(ctx, h.work, nil) {
		return
	}
	h.mu.Lock()
	for _, p := range products {
		for _, s := range slices.Clone(h.stalled[p]) {
			h.end(s)
			h.overlaps++
		}
	}
	var mine *stop
	if !h.started || mrand.Float64() < h.prob {
		mine = &stop{products: products, done: make(chan struct{})}
		for _, p := range products {
			h.stalled[p] = append(h.stalled[p], mine)
		}
	}
	h.started = true
	h.mu.Unlock()
	if mine == nil {
		return
	}
	if !wait(ctx, h.maxStall, mine.done) {
		h.mu.Lock()
		h.end(mine)
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
