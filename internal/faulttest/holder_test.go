package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/loadtest"
)

// maxFaultAttempts bounds the retries of a fault that needs the victim to
// be inside its critical section when the signal lands. With a chaos pause
// it almost always is; a retry covers the rare scrape that came just
// before the pause ended.
const maxFaultAttempts = 3

// holderSale is the set-up of the scenarios that stop a lock holder in
// its critical section (2: past its lease; 3: across a Redis restart): one
// Redis, replica a (the victim) that pauses inside every critical section,
// after reading the stock and before writing it, so that a SIGSTOP sent
// while it holds the lock almost certainly lands there, with a stock that
// will be stale when it wakes up; replica b, which sells meanwhile; and
// the product. The control turns the fence off (UNSAFE_NO_FENCE).
type holderSale struct {
	c       *cluster
	a, b    *replica
	id      int64
	stock   int64
	control bool
	notes   []string
}

// holderRate is the holder scenarios' request rate.
var holderRate = pick(60, 100)

func newHolderSale(t *testing.T, db database, ttl time.Duration, control bool) *holderSale {
	t.Helper()
	c := newCluster(t, 1, db)
	env := map[string]string{"LOCK_TTL": ttl.String(), "LOCK_WAIT": "2s"}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	h := &holderSale{c: c, control: control}
	h.a = c.replica("a", with(env, "CHAOS_PAUSE", "300ms"))
	h.b = c.replica("b", env)
	h.stock = plenty(holderRate)
	h.id = createProduct(t, h.b, int(h.stock))
	return h
}

// run runs the sale and, during it, the fault: up to maxFaultAttempts
// times, it waits until a holds the lock (before is a's metrics then) and
// calls once, which reports done when it caught a inside its critical
// section. The sale ends with the fault. The attempts' notes are logged
// after the sale.
func (h *holderSale) run(once func(ctx context.Context, before metrics) (done bool, note string, err error)) loadtest.Report {
	fault := func(ctx context.Context) error {
		for attempt := 1; attempt <= maxFaultAttempts; attempt++ {
			before, err := waitHoldStart(ctx, h.a, h.b, h.id, 3, 30*time.Second)
			if err != nil {
				return fmt.Errorf("attempt %d: %w; before it: %v", attempt, err, h.notes)
			}
			done, note, err := once(ctx, before)
			if note != "" {
				h.notes = append(h.notes, fmt.Sprintf("attempt %d: %s", attempt, note))
			}
			if err != nil || done {
				return err
			}
		}
		return fmt.Errorf("fault not injected: %d attempts, none caught %s inside its critical section: %v", maxFaultAttempts, h.a.name, h.notes)
	}
	cfg := saleConfig(h.id, holderRate, h.b, h.a)
	return h.c.sale(cfg, h.control, fault, &h.notes)
}
