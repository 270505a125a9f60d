package faulttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/faultproxy"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// Scenario 12 (d): a Sentinel split brain. The deployment of scenario 7
// (a master, its replica, three sentinels) with replicas a and b of the
// service, every process reaching every Redis process only through a
// proxy of that process (a faultproxy that knows which process each of
// its connections comes from): the sentinels announce their proxies, the
// replica announces its own, and the sentinels know the master by its
// proxy. While a holds the lock, the network splits in two sides:
//
//	the old master's side: the master and a
//	the other side:        the replica, the three sentinels and b
//
// Every proxy then holds the connections from processes of the other side
// (also those opened later), in both directions, and lets its own side
// through. The sentinels lose the master and promote the replica (about
// 2 s); b follows the switch and locks on the new master. a, which hears
// from no sentinel, goes on with its open connections to the old master,
// which still takes writes: both masters grant the lock, and two holders
// hold it at once, each in its own master. The fence in the database
// stands between them: a claim with a token older than the last one
// claimed is refused, and so is a write after a newer holder's claim.
// Then the partition heals: held bytes are delivered, a learns of the new
// master and follows it, and the sentinels turn the old master into the
// new one's replica (its copy of the lock is dropped with the rest).
//
// The scenario proves its fault: every sentinel names the replica as
// master while the old master still answers as master; reads of both
// masters' lock owners before and after a scrape of a and b show both
// masters granting the lock to different owners at once, while a and b
// each hold it by their own count; and the proxies held bytes of b and of
// the sentinels on their way to the old master. Without all of that it
// fails as "fault not injected".
func TestSentinelSplitBrain(t *testing.T) {
	t.Parallel()
	splitBrainScenario(t, false)
}

// Negative control of scenario 12: the same split brain with
// UNSAFE_NO_FENCE=true oversells. a and b each read the stock and write
// it back, one on each master's lock.
func TestSentinelSplitBrainControlNoFenceOversells(t *testing.T) {
	t.Parallel()
	splitBrainScenario(t, true)
}

// The two sides of the split, and the processes on each (by their names
// at the proxies).
const (
	oldSide = "the old master's side"
	newSide = "the new master's side"
)

func sideOf(process string) string {
	switch process {
	case "master", "a":
		return oldSide
	case "replica", "b", "sentinel 1", "sentinel 2", "sentinel 3":
		return newSide
	}
	return "" // unknown: on no side, cut off from all
}

// splitBrain is scenario 12's Redis deployment and its proxies.
type splitBrain struct {
	t       *testing.T
	name    string // the master's name at the sentinels
	names   *faultproxy.Processes
	master  *redistest.Server
	replica *redistest.Server
	// sentinels, and the proxy in front of every Redis process, by the
	// name of the process behind it.
	sentinels []*redisproc.Server
	proxies   map[string]*faultproxy.Proxy
}

// startSplitBrain starts the deployment and returns once the replica is in
// sync through the master's proxy, and every sentinel knows the master and
// the replica by their proxies and has a quorum.
func startSplitBrain(t *testing.T) *splitBrain {
	t.Helper()
	sb := &splitBrain{t: t, name: "seckill", names: &faultproxy.Processes{}, proxies: map[string]*faultproxy.Proxy{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// No wait before a full sync (Redis waits 5 s for more replicas).
	sb.master = redistest.Start(t, "--repl-diskless-sync-delay", "0")
	sb.names.Set(sb.master.PID(), "master")
	pm := sb.proxy("master", sb.master.Addr())
	sb.replica = redistest.Start(t, "--repl-diskless-sync-delay", "0")
	sb.names.Set(sb.replica.PID(), "replica")
	pr := sb.proxy("replica", sb.replica.Addr())
	// Each announces its proxy to whichever master it replicates: the
	// sentinels learn the replicas from the master's INFO.
	for s, p := range map[*redistest.Server]*faultproxy.Proxy{sb.master: pm, sb.replica: pr} {
		c := s.Client()
		if err := c.ConfigSet(ctx, "replica-announce-ip", "127.0.0.1").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ConfigSet(ctx, "replica-announce-port", port(p.Addr())).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rc := sb.replica.Client()
	if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", port(pm.Addr())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := poll.UntilNil(ctx, 10*time.Millisecond, func() error { return replicating(ctx, rc) }); err != nil {
		t.Fatalf("the replica to sync through the master's proxy: %v", err)
	}
	group, err := redisproc.StartSentinels(ctx, 3, redisproc.SentinelConfig{
		Master:     sb.name,
		MasterAddr: pm.Addr(),
		Replicas:   []string{pr.Addr()},
		Announce: func(i int, addr string) (string, error) {
			return sb.proxy(fmt.Sprintf("sentinel %d", i+1), addr).Addr(), nil
		},
	})
	if err != nil {
		t.Fatalf("start redis-sentinel: %v", err)
	}
	t.Cleanup(func() {
		for _, g := range group {
			if err := g.Close(); err != nil {
				t.Errorf("stop redis-sentinel: %v", err)
			}
		}
	})
	sb.sentinels = group
	for i, g := range group {
		sb.names.Set(g.PID(), fmt.Sprintf("sentinel %d", i+1))
	}
	if err := poll.UntilNil(ctx, 10*time.Millisecond, func() error { return sb.ready(ctx, pm.Addr(), pr.Addr()) }); err != nil {
		t.Fatalf("waiting for the sentinels to see the master, the replica and a quorum: %v", err)
	}
	return sb
}

// proxy puts a named faultproxy in front of the process called name on
// addr, closed when the test ends.
func (sb *splitBrain) proxy(name, addr string) *faultproxy.Proxy {
	p, err := faultproxy.StartNamed(addr, sb.names.Name)
	if err != nil {
		sb.t.Fatal(err)
	}
	sb.t.Cleanup(func() {
		if err := p.Close(); err != nil {
			sb.t.Errorf("close the proxy of %s: %v", name, err)
		}
	})
	sb.proxies[name] = p
	return p
}

// ready is nil once every sentinel (asked directly) names the master's
// proxy, sees the replica's proxy in sync, and has a quorum.
func (sb *splitBrain) ready(ctx context.Context, master, replica string) error {
	for _, g := range sb.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: g.Addr(), MaxRetries: -1})
		err := func() error {
			hp, err := c.GetMasterAddrByName(ctx, sb.name).Result()
			if err != nil || net.JoinHostPort(hp[0], hp[1]) != master {
				return fmt.Errorf("sentinel %s names %v (%v), want %s", g.Addr(), hp, err, master)
			}
			if err := c.CkQuorum(ctx, sb.name).Err(); err != nil {
				return fmt.Errorf("sentinel %s: %w", g.Addr(), err)
			}
			replicas, err := c.Replicas(ctx, sb.name).Result()
			if err != nil {
				return err
			}
			for _, r := range replicas {
				if net.JoinHostPort(r["ip"], r["port"]) == replica && r["flags"] == "slave" && r["master-link-status"] == "ok" {
					return nil
				}
			}
			return fmt.Errorf("sentinel %s does not see %s in sync: %v", g.Addr(), replica, replicas)
		}()
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// masterNamed is what every sentinel names as the master now ("" where one
// does not answer), asked directly.
func (sb *splitBrain) masterNamed(ctx context.Context) []string {
	out := make([]string, len(sb.sentinels))
	for i, g := range sb.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: g.Addr(), MaxRetries: -1})
		if hp, err := c.GetMasterAddrByName(ctx, sb.name).Result(); err == nil && len(hp) == 2 {
			out[i] = net.JoinHostPort(hp[0], hp[1])
		}
		_ = c.Close()
	}
	return out
}

// env is what a replica of the service needs to lock through the
// sentinels' proxies.
func (sb *splitBrain) env() map[string]string {
	addrs := make([]string, len(sb.sentinels))
	for i := range sb.sentinels {
		addrs[i] = sb.proxies[fmt.Sprintf("sentinel %d", i+1)].Addr()
	}
	return map[string]string{"REDIS_SENTINEL_MASTER": sb.name, "REDIS_SENTINEL_ADDRS": strings.Join(addrs, ",")}
}

// partition splits the processes into their sides: each proxy holds the
// connections of every process that is not on its server's side.
func (sb *splitBrain) partition() {
	for name, p := range sb.proxies {
		side := sideOf(name)
		p.PartitionClients(func(client string) bool { return sideOf(client) != side })
	}
}

func (sb *splitBrain) heal() {
	for _, p := range sb.proxies {
		p.Heal()
	}
}

// held is the bytes each proxy holds now across the partition, by the
// client they come from or go to: "b <-> master: 120". (Bytes waiting
// between two processes of one side are only passing through.)
func (sb *splitBrain) held() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(sb.proxies)) {
		st := sb.proxies[name].Stats()
		for _, client := range slices.Sorted(maps.Keys(st.WaitingFor)) {
			if n := st.WaitingFor[client]; n > 0 && sideOf(client) != sideOf(name) {
				if client == "" {
					client = "(unnamed)"
				}
				out = append(out, fmt.Sprintf("%s <-> %s: %d", client, name, n))
			}
		}
	}
	return out
}

// replicating is nil once the Redis behind c is a replica in sync.
func replicating(ctx context.Context, c *redis.Client) error {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
		return errors.New("not a replica in sync yet")
	}
	return nil
}

// role is the Redis's role ("master" or "slave") and, for a replica, the
// port of its master.
func role(ctx context.Context, c *redis.Client) (string, string, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", "", err
	}
	var r, mport string
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			r = v
		}
		if v, ok := strings.CutPrefix(line, "master_port:"); ok {
			mport = v
		}
	}
	return r, mport, nil
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// twoMasters is the moment both masters granted the lock at once.
type twoMasters struct {
	oldOwner, newOwner string
	// after is the time from the failover (every sentinel naming the new
	// master) to the sight.
	after time.Duration
	// heldA and heldB are a's and b's locks held by their own count,
	// scraped just after.
	heldA, heldB float64
}

// splitBrainRun is what scenario 12 saw.
type splitBrainRun struct {
	failover   time.Duration // from the partition until every sentinel named the replica
	both       *twoMasters
	heldAtHeal []string // bytes the proxies held when the partition healed
	evidence   string
	// demoted is from the heal until the old master was the new one's
	// replica; soldAfter, a's orders after that.
	demoted   time.Duration
	soldAfter float64
}

func splitBrainScenario(t *testing.T, control bool) {
	if runtime.GOOS != "linux" {
		t.Skip("the proxies tell a connection's process from Linux's /proc only")
	}
	sb := startSplitBrain(t)
	c := &cluster{t: t, db: t.TempDir() + "/seckill.db", kind: sqlite}
	env := with(sb.env(), "LOCK_TTL", "1s", "LOCK_WAIT", "2s")
	if control {
		env = with(env, "UNSAFE_NO_FENCE", "true")
	}
	a := c.replica("a", with(env, "CHAOS_PAUSE", "300ms"))
	sb.names.Set(a.pid(), "a")
	// b pauses too, less: its holds then last long enough to be seen by
	// its own count while the new master shows them.
	b := c.replica("b", with(env, "CHAOS_PAUSE", "100ms"))
	sb.names.Set(b.pid(), "b")
	// Stock the sale cannot sell out: a must still sell after the heal.
	rate := pick(40, 60)
	stock := plenty(rate)
	id := createProduct(t, b, int(stock))
	key := lockKey(id)
	mc := redis.NewClient(&redis.Options{Addr: sb.master.Addr(), MaxRetries: -1})
	defer mc.Close()
	rc := redis.NewClient(&redis.Options{Addr: sb.replica.Addr(), MaxRetries: -1})
	defer rc.Close()

	var run splitBrainRun
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	fault := func(ctx context.Context) error {
		before, err := waitHoldStart(ctx, a, b, id, 3, 30*time.Second)
		if err != nil {
			return err
		}
		mb, err := scrape(ctx, b)
		if err != nil {
			return err
		}
		rejectedBefore := before.fenceRejections() + mb.fenceRejections()
		owner, _, err := lockState(ctx, sb.master.Addr(), id)
		if err != nil {
			return err
		}
		sb.partition()
		cutAt := time.Now()
		note("%s held the lock (owner %q on the master, %v acquisitions); the network split: {master, a} | {replica, sentinels, b}", a.name, owner, before.acquisitions())

		// The sentinels promote the replica.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		newMaster := sb.proxies["replica"].Addr()
		if err := poll.UntilNil(wctx, 20*time.Millisecond, func() error {
			if got := sb.masterNamed(wctx); slices.ContainsFunc(got, func(s string) bool { return s != newMaster }) {
				return fmt.Errorf("sentinels name %v, want %s", got, newMaster)
			}
			return nil
		}); err != nil {
			sb.heal()
			return fmt.Errorf("fault not injected: the sentinels did not promote the replica within 30 s of the partition: %w", err)
		}
		failoverAt := time.Now()
		run.failover = failoverAt.Sub(cutAt)
		note("%v later every sentinel named the replica (%s) as master", run.failover.Round(time.Millisecond), newMaster)

		// Both masters grant the lock to different owners at once: read
		// in turn, the old master's owner, the new master's, a's and b's
		// locks held by their own count, the new master's owner again and
		// the old master's again. Each owner is a fresh UUID per
		// acquisition, so an owner read the same before and after was
		// there throughout: both keys were held while a and b, each
		// holding a lock, were scraped. Both masters must also say they
		// are one. (The cheap reads come first: a scrape is a page of
		// metrics to parse, and parsing two every few milliseconds would
		// take the CPU from this process's proxies.)
		err = poll.Until(wctx, 5*time.Millisecond, func() (bool, error) {
			o1, err1 := ownerOn(wctx, mc, key)
			o2, err2 := ownerOn(wctx, rc, key)
			if err1 != nil || err2 != nil || o1 == "" || o2 == "" || o1 == o2 {
				return false, nil
			}
			sa, errA := scrape(wctx, a)
			sbm, errB := scrape(wctx, b)
			o3, err3 := ownerOn(wctx, rc, key)
			o4, err4 := ownerOn(wctx, mc, key)
			if errors.Join(errA, errB, err3, err4) != nil || sa.held() < 1 || sbm.held() < 1 || o3 != o2 || o4 != o1 {
				return false, nil
			}
			r1, _, err1 := role(wctx, mc)
			r2, _, err2 := role(wctx, rc)
			if err1 != nil || err2 != nil || r1 != "master" || r2 != "master" {
				return false, nil
			}
			run.both = &twoMasters{oldOwner: o1, newOwner: o2, after: time.Since(failoverAt), heldA: sa.held(), heldB: sbm.held()}
			return true, nil
		})
		if err != nil {
			sb.heal()
			return fmt.Errorf("fault not injected: no moment when both masters held the lock for different owners within 30 s of the failover: %w", err)
		}
		note("%v after the failover both masters granted the lock: %q on the old master, %q on the new one (a holds %v, b %v by their own count)",
			run.both.after.Round(time.Millisecond), run.both.oldOwner, run.both.newOwner, run.both.heldA, run.both.heldB)

		// What the fence did (or, without it, the oversell).
		err = poll.Until(wctx, 20*time.Millisecond, func() (bool, error) {
			if control {
				p, err := b.api().Product(wctx, id)
				if err != nil {
					return false, nil
				}
				ok, what := oversoldNow(p, stock)
				if ok {
					run.evidence = what
				}
				return ok, nil
			}
			sa, errA := scrape(wctx, a)
			sbm, errB := scrape(wctx, b)
			if errA != nil || errB != nil || sa.fenceRejections()+sbm.fenceRejections() <= rejectedBefore {
				return false, nil
			}
			run.evidence = fmt.Sprintf("fence rejections went from %v to %v (a %v, b %v)", rejectedBefore,
				sa.fenceRejections()+sbm.fenceRejections(), sa.fenceRejections(), sbm.fenceRejections())
			return true, nil
		})
		run.heldAtHeal = sb.held()
		sb.heal()
		healAt := time.Now()
		if err != nil {
			return fmt.Errorf("fault not injected: no evidence of the two holders' writes meeting within 30 s (a fence rejection; without the fence, an oversell): %w", err)
		}
		note("%s; the partition healed after %v, with %s held", run.evidence, healAt.Sub(cutAt).Round(time.Millisecond), strings.Join(run.heldAtHeal, ", "))

		// The sentinels make the old master the new one's replica, and a
		// follows the new master: it sells again.
		if err := poll.Until(wctx, 10*time.Millisecond, func() (bool, error) {
			r, mport, err := role(wctx, mc)
			return err == nil && r == "slave" && mport == port(newMaster), nil
		}); err != nil {
			return fmt.Errorf("after the heal: the old master did not become the new one's replica: %w", err)
		}
		run.demoted = time.Since(healAt)
		m, err := scrape(ctx, a)
		if err != nil {
			return err
		}
		soldBefore := m[mCreated]
		if err := poll.Until(wctx, 20*time.Millisecond, func() (bool, error) {
			m, err := scrape(wctx, a)
			run.soldAfter = m[mCreated] - soldBefore
			return err == nil && run.soldAfter > 0, nil
		}); err != nil {
			return fmt.Errorf("after the heal: %s sold nothing once the old master was a replica: %w", a.name, err)
		}
		note("%v after the heal the sentinels had made the old master the new one's replica, and %s sold again", run.demoted.Round(time.Millisecond), a.name)
		return nil
	}
	cfg := saleConfig(id, rate, b, a)
	rep := c.sale(cfg, control, fault, &notes)

	ma, mb := mustScrape(t, a), mustScrape(t, b)
	t.Logf("%s: leases lost %v, fence rejections claim %v write %v; %s: leases lost %v, fence rejections claim %v write %v",
		a.name, ma[mLeasesLost], ma[mFenceClaim], ma[mFenceWrite], b.name, mb[mLeasesLost], mb[mFenceClaim], mb[mFenceWrite])
	if run.both == nil {
		t.Fatal("fault not injected: both masters were never seen granting the lock at once")
	}
	t.Logf("holders at once: 2 (%q on the old master, %q on the new one), %v after a failover of %v",
		run.both.oldOwner, run.both.newOwner, run.both.after.Round(time.Millisecond), run.failover.Round(time.Millisecond))
	// The partition held what crossed it: b's and the sentinels' bytes to
	// the old master, at least.
	if !slices.ContainsFunc(run.heldAtHeal, func(s string) bool { return strings.HasSuffix(strings.SplitN(s, ":", 2)[0], "<-> master") }) {
		t.Errorf("fault not injected: the old master's proxy held nothing at the heal (%v)", run.heldAtHeal)
	}
	if control {
		assertOversold(t, rep)
		return
	}
	assertSafe(t, rep)
	if ma.fenceRejections()+mb.fenceRejections() == 0 {
		t.Errorf("fence rejections: got 0, want > 0: the two holders' writes never met the fence")
	}
	orders, err := b.api().Orders(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	assertFencesIncrease(t, orders)
}

// mCreated is a replica's orders (its 201s).
const mCreated = `seckill_purchases_total{outcome="created"}`

// ownerOn reads the lock's owner on the Redis behind c ("" if none).
func ownerOn(ctx context.Context, c *redis.Client, key string) (string, error) {
	o, err := c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return strings.TrimSuffix(o, " q"), err
}
