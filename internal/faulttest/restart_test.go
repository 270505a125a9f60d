package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// Scenario 3: restart the single Redis server mid-sale, while a replica
// is inside a purchase's critical section. The server keeps nothing
// (no persistence): the lock, the wait queues and the fence counter are
// gone, so the other replica acquires at once, with a token that the
// empty server computes from its clock, not from the lost counter. It must
// still be larger than the one the stalled holder got before the restart,
// or the other replica's claim would fail and the sale would stop; and
// the stalled holder's late write must be refused. Afterwards the orders'
// fences never decrease in order id, and the sale goes on.
//
// The holder is kept inside its critical section across the restart with
// SIGSTOP, so that the order of events is certain rather than a race with
// the chaos pause: stop it, restart Redis, wait until the other replica has
// sold, continue it. The lease is long (10 s) and stays valid for the
// whole stall: the other replica gets the lock only because Redis forgot
// it, not because the lease ran out.
func TestRedisRestartMidSale(t *testing.T) {
	t.Parallel()
	restartRedis(t, sqlite, false)
}

// Negative control of scenario 3: the same restart with UNSAFE_NO_FENCE=true
// oversells. The holder read the stock before the restart and writes it
// back, minus one, after the other replica's sales.
func TestRedisRestartControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	restartRedis(t, sqlite, true)
}

// Scenario 3 on PostgreSQL: the token from the empty Redis's clock must
// still claim the fence there, and the old holder's write be refused.
func TestRedisRestartMidSalePostgres(t *testing.T) {
	t.Parallel()
	restartRedis(t, postgres, false)
}

func restartRedis(t *testing.T, db database, control bool) {
	h := newHolderSale(t, db, 10*time.Second, control)
	a, b, id, srv := h.a, h.b, h.id, h.c.redis[0]
	var soldAtRestart int64
	rep := h.run(func(ctx context.Context, before metrics) (bool, string, error) {
		if err := a.pause(); err != nil {
			return false, "", err
		}
		stoppedAt := time.Now()
		s, ok := sold(ctx, b, id)
		if !ok {
			_ = a.resume()
			return false, "", fmt.Errorf("read the product from %s", b.name)
		}
		soldAtRestart = s
		if err := srv.Server.Restart(ctx); err != nil {
			_ = a.resume()
			return false, "", fmt.Errorf("restart redis-server: %w", err)
		}
		restarted := time.Since(stoppedAt)
		// The sale resumes: b sells on the empty server (in the control,
		// more than midWrites: see controlLead), unless a was stopped
		// inside a database write (see stalledWriterWait).
		werr := waitSold(ctx, b, id, s+controlLead(control), stalledWriterWait)
		stopped := time.Since(stoppedAt)
		if err := a.resume(); err != nil {
			return false, "", err
		}
		if werr != nil {
			if ctx.Err() != nil {
				return false, "", ctx.Err()
			}
			return false, fmt.Sprintf("%s stopped with %d sold; Redis back after %v; %s did not sell %d more: %s",
				a.name, s, restarted.Round(time.Millisecond), b.name, controlLead(control)+1, stoppedInWrite), nil
		}
		note := fmt.Sprintf("%s stopped with %d sold; Redis (pid %d now) back after %v; %s sold again; %s continued after %v",
			a.name, s, srv.PID(), restarted.Round(time.Millisecond), b.name, a.name, stopped.Round(time.Millisecond))
		evidence, err := waitEvidence(ctx, a, b, id, h.stock, before, control)
		if err != nil {
			return false, "", err
		}
		return evidence != "", note + "; " + evidence, nil
	})

	orders, err := b.api().Orders(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ma := mustScrape(t, a)
	t.Logf("%s: fence rejections claim %v write %v, leases lost %v; %d orders, fences from %d to %d",
		a.name, ma[mFenceClaim], ma[mFenceWrite], ma[mLeasesLost], len(orders), first(orders).Fence, last(orders).Fence)
	if control {
		assertOversold(t, rep)
		backwards := 0
		for i := 1; i < len(orders); i++ {
			if orders[i].Fence < orders[i-1].Fence {
				backwards++
			}
		}
		t.Logf("control: %d orders carry a fence below the previous order's", backwards)
		return
	}
	assertSafe(t, rep)
	assertFencesIncrease(t, orders)
	if ma.fenceRejections() == 0 {
		t.Errorf("fault not injected: fence rejections of the replica stalled across the restart: got 0, want > 0")
	}
	if rep.After.Sold <= soldAtRestart {
		t.Errorf("orders after the sale: got %d, want more than the %d there were at the restart", rep.After.Sold, soldAtRestart)
	}
}

// waitEvidence waits for a sign that the stalled replica a was caught
// inside its critical section: a fence rejection on a or, in the control,
// the oversell itself. It returns "" if none comes: a was stopped just
// after its critical section, and the caller tries again.
func waitEvidence(ctx context.Context, a, b *replica, id, s int64, before metrics, control bool) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var evidence string
	// Every 20 ms: a scrape is a page of metrics to parse, and parsing one
	// every 5 ms took most of a CPU from the proxies of the network
	// scenarios, which run in this process, under the race detector on
	// one CPU.
	err := poll.Until(wctx, 20*time.Millisecond, func() (bool, error) {
		if control {
			p, err := b.api().Product(wctx, id)
			if err != nil {
				return false, nil
			}
			ok, what := oversoldNow(p, s)
			if ok {
				evidence = what
			}
			return ok, nil
		}
		m, err := scrape(wctx, a)
		if err != nil || m.fenceRejections() <= before.fenceRejections() {
			return false, nil
		}
		evidence = fmt.Sprintf("%s's fence rejections went from %v to %v", a.name, before.fenceRejections(), m.fenceRejections())
		return true, nil
	})
	if err != nil && ctx.Err() != nil {
		return "", ctx.Err()
	}
	return evidence, nil
}

func first(o []apiclient.Order) apiclient.Order {
	if len(o) == 0 {
		return apiclient.Order{}
	}
	return o[0]
}

func last(o []apiclient.Order) apiclient.Order {
	if len(o) == 0 {
		return apiclient.Order{}
	}
	return o[len(o)-1]
}
