package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/faultproxy"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/loadtest"
)

// startProxy puts a faultproxy in front of upstream for the duration of
// t.
func startProxy(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close the proxy to %s: %v", upstream, err)
		}
	})
	return p
}

// linkTTL is the lease of the link scenarios: short, so that the faults,
// multiples of it, stay short.
const linkTTL = time.Second

// linkFault is a fault on one replica's link, through its proxy: inject
// starts it, lift ends it, length after inject.
type linkFault struct {
	name         string
	inject, lift func(p *faultproxy.Proxy)
	length       time.Duration
	// injected reports whether the fault met traffic: bytes held, or
	// delayed.
	injected func(s faultproxy.Stats) bool
}

// Scenario 8 (a): replica a's link to Redis is partitioned for 2 x the
// TTL while a is inside a purchase's critical section (a chaos pause of
// 1.5 x the TTL between its reads and its write), its database link
// (a SQLite file) open. Its renewals are held by the partition, its lease
// runs out in Redis, and b takes the lock over while a still works: two
// holders at once. a's write, 1.5 x the TTL into its pause, still inside
// the partition, is refused by the fence (b's claim is newer). When the
// partition heals, a's held renewals and release arrive late and find b's
// lock, which they leave alone.
func TestRedisLinkPartitionedPastLease(t *testing.T) {
	t.Parallel()
	redisLinkFault(t, partition(2*linkTTL), false)
}

// Negative control of scenario 8: the same partition with
// UNSAFE_NO_FENCE=true. a writes back the stock it read before b's sales,
// and the sale oversells.
func TestRedisLinkPartitionedControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	redisLinkFault(t, partition(2*linkTTL), true)
}

// Scenario 9 (b): 1.5 x the TTL of latency, each way, on a's link to Redis
// while a is inside a critical section, for 2 x the TTL. Nothing is lost:
// every renewal a sends arrives, but 1.5 x the TTL late, after its lease
// has run out in Redis and b has taken the lock over. The renewals then
// find b's lock and fail; a's write is refused by the fence, as in (a).
func TestRedisLinkLatencyPastLease(t *testing.T) {
	t.Parallel()
	redisLinkFault(t, latency(3*linkTTL/2, 2*linkTTL), false)
}

// Negative control of scenario 9: the same latency with
// UNSAFE_NO_FENCE=true oversells.
func TestRedisLinkLatencyControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	redisLinkFault(t, latency(3*linkTTL/2, 2*linkTTL), true)
}

func partition(length time.Duration) linkFault {
	return linkFault{
		name:     fmt.Sprintf("partition for %v", length),
		inject:   (*faultproxy.Proxy).Partition,
		lift:     (*faultproxy.Proxy).Heal,
		length:   length,
		injected: func(s faultproxy.Stats) bool { return s.Held > 0 },
	}
}

func latency(d, length time.Duration) linkFault {
	return linkFault{
		name:     fmt.Sprintf("%v of latency each way for %v", d, length),
		inject:   func(p *faultproxy.Proxy) { p.SetLatency(d) },
		lift:     func(p *faultproxy.Proxy) { p.SetLatency(0) },
		length:   length,
		injected: func(s faultproxy.Stats) bool { return s.Delayed > 0 },
	}
}

// takeover is what a link fault saw of the lock while a was cut off.
type takeover struct {
	// took is how long after the fault's start another owner held the
	// product's lock in Redis while a was still in a hold that began
	// before (0: not seen).
	took time.Duration
	// owners are the lock's value before that owner (a's, unless a took
	// its hold while the one before still held) and that owner's.
	owners [2]string
	// acquisitions and lost are a's counts of acquisitions and of leases
	// lost when the hold in which the other owner was seen began (or when
	// the watch began following it).
	acquisitions, lost float64
}

// judge ends a link fault's sale attempt: the fault counts as injected
// only when the takeover was seen and confirmed, and a was inside its
// critical section (waitEvidence); note, which says what the fault did,
// gains all three. A takeover not confirmed is cleared.
func (tk *takeover) judge(ctx context.Context, h *holderSale, before metrics, note string) (bool, string, error) {
	if tk.took > 0 {
		note += fmt.Sprintf("; %v in, Redis's owner went from %q to %q while %s was in one hold", tk.took.Round(time.Millisecond), tk.owners[0], tk.owners[1], h.a.name)
		ok, err := tk.confirm(ctx, h.a)
		if err != nil {
			return false, "", err
		}
		if !ok {
			*tk = takeover{}
			note += ", which ended without losing its lease: its release, in flight, had handed the lock on"
		}
	}
	evidence, err := waitEvidence(ctx, h.a, h.b, h.id, h.stock, before, h.control)
	if err != nil {
		return false, "", err
	}
	if evidence == "" {
		return false, note + "; no evidence that it was inside its critical section", nil
	}
	return tk.took > 0, note + "; " + evidence, nil
}

// confirm waits (at most 30 s) until a has counted a lost lease since the
// hold of a's in which another owner was seen began, or until that hold
// has ended without one, and reports which. The lock counts a loss before
// the release of the hold that suffered it. The hold has ended once a has
// released as many holds as it had taken when it began, it among them: a
// newer hold of a's may begin while it still runs (its lease ran out, and
// the other owner let go), so a changed count of acquisitions does not
// say it has. One that ended without a loss was not overlapped: its
// release had reached Redis and handed the lock on, and the watch read the
// new owner before a counted the release.
func (tk takeover) confirm(ctx context.Context, a *replica) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lost bool
	err := poll.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		m, err := scrape(ctx, a)
		if err != nil {
			return false, nil
		}
		lost = m[mLeasesLost] > tk.lost
		return lost || m[mReleases] >= tk.acquisitions, nil
	})
	if err != nil {
		return false, fmt.Errorf("waiting for the end of %s's hold in which %q was seen: %w", a.name, tk.owners[1], err)
	}
	return lost, nil
}

func redisLinkFault(t *testing.T, f linkFault, control bool) {
	c := newCluster(t, 1, sqlite)
	redisAddr := c.redis[0].Addr()
	pa := startProxy(t, redisAddr)
	env := map[string]string{"LOCK_TTL": linkTTL.String(), "LOCK_WAIT": "2s"}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	h := &holderSale{c: c, control: control}
	h.a = c.replica("a", with(env, "REDIS_ADDR", pa.Addr(), "CHAOS_PAUSE", (3*linkTTL/2).String()))
	h.b = c.replica("b", env)
	h.stock = plenty(holderRate)
	h.id = createProduct(t, h.b, int(h.stock))
	a, b := h.a, h.b

	var seen takeover
	start := time.Now()
	rep := h.run(func(ctx context.Context, before metrics) (bool, string, error) {
		owner, _, err := lockState(ctx, redisAddr, h.id)
		if err != nil {
			return false, "", err
		}
		f.inject(pa)
		injectedAt := time.Now()
		tk, werr := watchTakeover(ctx, a, redisAddr, h.id, owner, before, injectedAt.Add(f.length))
		if d := time.Until(injectedAt.Add(f.length)); d > 0 {
			// The fault's length, not a wait for something to settle.
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			timer.Stop()
		}
		f.lift(pa)
		if werr != nil {
			return false, "", werr
		}
		note := fmt.Sprintf("%s on %s's Redis link %v into the sale, while it held the lock", f.name, a.name, time.Since(start).Round(time.Millisecond))
		done, note, err := tk.judge(ctx, h, before, note)
		if tk.took > 0 {
			seen = tk
		}
		return done, note, err
	})

	ma, mb := mustScrape(t, a), mustScrape(t, b)
	st := pa.Stats()
	t.Logf("%s: leases lost %v, renewal failures %v, fence rejections claim %v write %v; %s: fence rejections %v; proxy: %d bytes held, %d delayed",
		a.name, ma[mLeasesLost], ma[mRenewalFailures], ma[mFenceClaim], ma[mFenceWrite], b.name, mb.fenceRejections(), st.Held, st.Delayed)
	if !f.injected(st) {
		t.Fatalf("fault not injected: the %s met no traffic on %s's Redis link (proxy stats %+v)", f.name, a.name, st)
	}
	seen.assertOutcome(t, a, "its Redis link under the "+f.name, ma, rep, control)
}

// assertOutcome checks what a link fault must show once the sale is
// over: a second holder seen while a (its link under fault, as what says)
// still held the lock, a's lease lost, and then, with the fence on,
// nothing oversold and a's late write refused; with it off, an oversell.
func (tk takeover) assertOutcome(t *testing.T, a *replica, what string, ma metrics, rep loadtest.Report, control bool) {
	t.Helper()
	if tk.took == 0 {
		t.Fatalf("fault not injected: no other holder was seen in Redis while %s held the lock", a.name)
	}
	t.Logf("holders at once: 2 (%s, %s, and %q from %v into the fault)", a.name, what, tk.owners[1], tk.took.Round(time.Millisecond))
	if ma[mLeasesLost] < 1 {
		t.Errorf("leases lost by %s: got %v, want >= 1: its lease ran out during the fault", a.name, ma[mLeasesLost])
	}
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if ma.fenceRejections() == 0 {
		t.Errorf("fence rejections of %s: got 0, want > 0: its late write was not refused", a.name)
	}
}

// watchTakeover polls Redis from the start of the fault until another
// owner holds the product's lock while a is in a hold that began before
// that owner's (a's acquisitions unchanged since the owner before it was
// seen, and a still holding), or until the fault's end plus a grace for a
// loaded machine. The hold seen in before may end before the fault slows
// it (a loaded machine can see a hold late); the fault stays in place, so
// the watch then follows a's next holds rather than give up. It returns
// what it saw; a zero took means no takeover in time.
func watchTakeover(ctx context.Context, a *replica, redisAddr string, id int64, owner string, before metrics, end time.Time) (takeover, error) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	defer cancel()
	// One connection for the whole watch: a new one per read is slow
	// enough, in a test binary slowed by the race detector on one CPU, to
	// let a short hold pass unseen.
	rc := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	defer rc.Close()
	key := lockKey(id)
	acquisitions, lost := before.acquisitions(), before[mLeasesLost]
	var tk takeover
	err := poll.Until(ctx, 2*time.Millisecond, func() (bool, error) {
		now, err := ownerOn(ctx, rc, key)
		if err != nil || now == "" || now == owner {
			return false, nil
		}
		m, err := scrape(ctx, a)
		if err != nil {
			return false, nil
		}
		if m.acquisitions() != acquisitions || m.held() < 1 {
			// a's hold ended before this owner came: no overlap. Watch
			// on from the owner read after this scrape, so that a hold
			// of a's that began in between is not taken for another's.
			acquisitions, lost = m.acquisitions(), m[mLeasesLost]
			if owner, err = ownerOn(ctx, rc, key); err != nil {
				owner = now
			}
			return false, nil
		}
		tk = takeover{took: time.Since(start), owners: [2]string{owner, now}, acquisitions: acquisitions, lost: lost}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		return tk, err
	}
	return tk, nil
}
