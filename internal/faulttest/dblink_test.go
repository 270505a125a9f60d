package faulttest

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"
)

// Scenario 11 (c): replica a's link to PostgreSQL (through a proxy) gets
// 0.5 x the TTL of latency each way while a is inside a critical section,
// so that each of its round trips to the database takes as long as the
// whole lease: its write reaches the database after its lease has run out
// and b has taken the lock and claimed the fence. The fence refuses it.
// No more latency than that: a purchase slowed from its start (some seven
// round trips) must still end within the service's 10 s bound on a
// batch's work, or it fails before its write can be refused.
//
// The replicas run with LOCK_RENEW=false, a lease that lasts its TTL and
// no more, as with locks that do not renew (bsm/redislock; redsync by
// default). With renewal on, a slow database only makes the holder hold
// longer: its Redis link is fine and the watchdog keeps the lease, as
// scenario 5 shows for a slow critical section; there is then nothing for
// the fence to refuse, and the control could not oversell.
func TestDatabaseLinkSlowPastLeasePostgres(t *testing.T) {
	t.Parallel()
	dbLinkSlow(t, false)
}

// Negative control of scenario 11: the same latency with
// UNSAFE_NO_FENCE=true. a's write-back of the stock it read, delayed past
// b's sales, oversells.
func TestDatabaseLinkSlowControlNoFenceOversellsPostgres(t *testing.T) {
	t.Parallel()
	dbLinkSlow(t, true)
}

func dbLinkSlow(t *testing.T, control bool) {
	const ttl = time.Second
	const lat = ttl / 2
	c := newCluster(t, 1, postgres)
	u, err := url.Parse(c.db)
	if err != nil {
		t.Fatal(err)
	}
	pd := startProxy(t, u.Host)
	u.Host = pd.Addr()
	env := map[string]string{"LOCK_TTL": ttl.String(), "LOCK_WAIT": "2s", "LOCK_RENEW": "false"}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	h := &holderSale{c: c, control: control}
	h.a = c.replica("a", with(env, "DATABASE", u.String(), "CHAOS_PAUSE", "300ms"))
	h.b = c.replica("b", env)
	h.stock = plenty(holderRate)
	h.id = createProduct(t, h.b, int(h.stock))
	a, b := h.a, h.b
	redisAddr := c.redis[0].Addr()

	var seen takeover
	rep := h.run(func(ctx context.Context, before metrics) (bool, string, error) {
		owner, _, err := lockState(ctx, redisAddr, h.id)
		if err != nil {
			return false, "", err
		}
		pd.SetLatency(lat)
		defer pd.SetLatency(0)
		tk, err := watchTakeover(ctx, a, redisAddr, h.id, owner, before, time.Now().Add(4*ttl))
		if err != nil {
			return false, "", err
		}
		note := fmt.Sprintf("%v of latency each way on %s's database link while it held the lock", lat, a.name)
		done, note, err := tk.judge(ctx, h, before, note)
		if tk.took > 0 {
			seen = tk
		}
		return done, note, err
	})

	ma, mb := mustScrape(t, a), mustScrape(t, b)
	st := pd.Stats()
	t.Logf("%s: leases lost %v, fence rejections claim %v write %v; %s: fence rejections %v; proxy: %d bytes delayed",
		a.name, ma[mLeasesLost], ma[mFenceClaim], ma[mFenceWrite], b.name, mb.fenceRejections(), st.Delayed)
	if st.Delayed == 0 {
		t.Fatalf("fault not injected: no byte of %s's database link was delayed (proxy stats %+v)", a.name, st)
	}
	seen.assertOutcome(t, a, "its statements slowed", ma, rep, control)
}
