package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/fakeclock"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// clockTTL is the lease of the clock scenario: Redlock's node timeout is
// TTL/100 (at most 50 ms), and a 5 s lease gives a loaded machine the
// whole 50 ms.
const clockTTL = 5 * time.Second

// Scenario 10 (e): Redlock over three redis-server processes, the second
// of which runs on a clock that the test can step (internal/fakeclock;
// TestRedisExpiryFollowsTheClock shows that its key expiry follows it).
// Replica a cannot reach the third node (its proxy resets a's
// connections): each of a's acquisitions holds a bare majority, nodes 0
// and 1.
// While a is inside that hold (a chaos pause of 2 s between its reads and
// its write), node 1's clock jumps 2 x the TTL forward, a's key there
// expires at once, and b acquires nodes 1 and 2: two clients each hold a
// majority, as in Kleppmann's argument against Redlock. b's token is
// larger (node 1 issues its clock, now ahead), its claim is newer, and
// a's write is refused by the fence.
func TestRedlockClockJump(t *testing.T) {
	t.Parallel()
	redlockClockJump(t, false)
}

// Negative control of scenario 10: the same jump with UNSAFE_NO_FENCE=true
// oversells.
func TestRedlockClockJumpControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	redlockClockJump(t, true)
}

func redlockClockJump(t *testing.T, control bool) {
	clock, err := fakeclock.New()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clock.Close() })
	c := newCluster(t, 0, sqlite)
	c.redis = []*redistest.Server{redistest.Start(t), redistest.StartEnv(t, clock.Env()), redistest.Start(t)}
	addrs := []string{c.redis[0].Addr(), c.redis[1].Addr(), c.redis[2].Addr()}
	p2 := startProxy(t, addrs[2])
	env := map[string]string{"LOCK_TTL": clockTTL.String(), "LOCK_WAIT": "2s"}
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	h := &holderSale{c: c, control: control}
	h.a = c.replica("a", with(env, "REDIS_ADDRS", strings.Join([]string{addrs[0], addrs[1], p2.Addr()}, ","), "CHAOS_PAUSE", "2s"))
	h.b = c.replica("b", env)
	// b, which reaches all three nodes, can win the lock hold after hold
	// and sell a batch each time, and a may hold it only late in the
	// sale; the fault then needs b to have buyers and stock still: the
	// sale lasts as long as the fault, and has more stock than it can
	// sell.
	h.stock = plenty(holderRate)
	h.id = createProduct(t, h.b, int(h.stock))
	a, b := h.a, h.b
	key := lockKey(h.id)
	nodes := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer nodes[i].Close()
	}

	// a cannot reach node 2 from the start: each of its holds is a bare
	// majority, nodes 0 and 1. The proxy resets a's connections rather
	// than holding them: with node 2 partitioned, a process whose first
	// attempt finds the lock held waits out its whole wait without
	// acquiring, and a would never hold the lock for the fault to catch.
	p2.Reject()
	var seen *majorities
	rep := h.run(func(ctx context.Context, before metrics) (bool, string, error) {
		owners, err := ownersOf(ctx, nodes, key)
		if err != nil {
			return false, "", err
		}
		ownerA := owners[0]
		if ownerA == "" || owners[1] != ownerA || owners[2] == ownerA {
			return false, fmt.Sprintf("caught a hold of %s's with owners %q, not a bare majority of nodes 0 and 1", a.name, owners), nil
		}
		skewBefore, err := skew(ctx, addrs[1])
		if err != nil {
			return false, "", err
		}
		clock.Jump(2 * clockTTL)
		skewAfter, err := skew(ctx, addrs[1])
		if err != nil {
			return false, "", err
		}
		note := fmt.Sprintf("%s held nodes 0 and 1 as %q; node 1's clock jumped from %v to %v ahead of ours",
			a.name, ownerA, skewBefore.Round(time.Millisecond), skewAfter.Round(time.Millisecond))
		if skewAfter-skewBefore < 2*clockTTL-time.Second {
			return false, "", fmt.Errorf("fault not injected: node 1's clock moved by %v, want about %v", skewAfter-skewBefore, 2*clockTTL)
		}
		m, err := watchMajorities(ctx, a, nodes, key, ownerA, before)
		if err != nil {
			return false, "", err
		}
		if m != nil {
			seen = m
			note += fmt.Sprintf("; %v after the jump nodes hold %q: %s holds nodes %v, still in its hold, and %q holds nodes %v",
				m.after.Round(time.Millisecond), m.owners, a.name, m.nodesA, m.ownerB, m.nodesB)
		}
		evidence, err := waitEvidence(ctx, a, b, h.id, h.stock, before, control)
		if err != nil {
			return false, "", err
		}
		if evidence == "" {
			return false, note + "; no evidence that it was inside its critical section", nil
		}
		return m != nil, note + "; " + evidence, nil
	})

	ma, mb := mustScrape(t, a), mustScrape(t, b)
	t.Logf("%s: leases lost %v, fence rejections claim %v write %v; %s: fence rejections %v, leases lost %v; node 1's clock %v ahead at the end",
		a.name, ma[mLeasesLost], ma[mFenceClaim], ma[mFenceWrite], b.name, mb.fenceRejections(), mb[mLeasesLost], clock.Offset())
	if seen == nil {
		t.Fatalf("fault not injected: no moment when %s, still in its hold of nodes 0 and 1, and another owner each held a majority", a.name)
	}
	t.Logf("holders at once: 2, each with a majority (%s: nodes %v; %q: nodes %v), %v after the jump", a.name, seen.nodesA, seen.ownerB, seen.nodesB, seen.after.Round(time.Millisecond))
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if ma.fenceRejections() == 0 {
		t.Errorf("fence rejections of %s: got 0, want > 0: its write after the takeover was not refused", a.name)
	}
	orders, err := b.api().Orders(context.Background(), h.id)
	if err != nil {
		t.Fatal(err)
	}
	assertFencesIncrease(t, orders)
}

// majorities is a moment when two owners each held a majority of nodes in
// their own eyes: a, which acquired nodes 0 and 1 and is still in that
// hold, and another owner that holds two nodes in Redis.
type majorities struct {
	after          time.Duration
	owners         []string
	nodesA, nodesB []int
	ownerB         string
}

// watchMajorities polls the nodes until another owner holds two of them
// while a is still in the hold seen in before (nil if a's hold ends first
// or nothing happens within 20 s).
func watchMajorities(ctx context.Context, a *replica, nodes []*redis.Client, key, ownerA string, before metrics) (*majorities, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var m *majorities
	err := poll.Until(ctx, 2*time.Millisecond, func() (bool, error) {
		owners, err := ownersOf(ctx, nodes, key)
		if err != nil {
			return false, nil
		}
		count := map[string][]int{}
		for i, o := range owners {
			if o != "" {
				count[o] = append(count[o], i)
			}
		}
		for o, nodes := range count {
			if o == ownerA || len(nodes) < 2 {
				continue
			}
			ma, err := scrape(ctx, a)
			if err != nil {
				return false, nil
			}
			if ma.acquisitions() != before.acquisitions() || ma.held() < 1 {
				return true, nil // a's hold ended first
			}
			m = &majorities{after: time.Since(start), owners: owners, nodesA: []int{0, 1}, nodesB: nodes, ownerB: o}
			return true, nil
		}
		return false, nil
	})
	if err != nil && !errors.Is(err, poll.ErrTimeout) {
		return nil, err
	}
	return m, nil
}

// ownersOf reads the lock's owner on each node ("" where it has none),
// through clients kept open: a new connection per read would let a short
// hold pass between two reads.
func ownersOf(ctx context.Context, nodes []*redis.Client, key string) ([]string, error) {
	owners := make([]string, len(nodes))
	for i, c := range nodes {
		o, err := ownerOn(ctx, c, key)
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		owners[i] = o
	}
	return owners, nil
}

// skew is how far the server's TIME is ahead of this process's clock.
func skew(ctx context.Context, addr string) (time.Duration, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return time.Until(tm), nil
}
