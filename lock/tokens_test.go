package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// A fencing token must be larger than every token issued before it for the
// same lock, also after Redis lost the latest state of the counter. Each
// event below loses it a different way; each test checks the first token
// after the loss against the last one before. Its control runs the same
// event with the rule that tokens are the last token plus one (the clock
// only when the counter is missing), or a counter alone, and the token goes
// back: the test would catch a lock that lets it.

// tokenEvent acquires the lock "fenced" a few times, makes Redis lose part
// of the counter's history, and acquires it once more. It returns the last
// token before the loss and the first after.
type tokenEvent func(t *testing.T, opts lock.Options) (last, next int64)

func TestTokenIncreasesAfterStaleSnapshotRestart(t *testing.T) {
	t.Parallel()
	assertTokenIncreases(t, staleSnapshotRestart, lock.Options{})
}

func TestTokenStaleSnapshotControlCounterRuleGoesBack(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortControl)
	assertTokenGoesBack(t, staleSnapshotRestart, lock.Options{UnsafeCounterTokens: true})
}

func TestTokenIncreasesAfterFailoverToLaggingReplica(t *testing.T) {
	t.Parallel()
	assertTokenIncreases(t, failoverToLaggingReplica, lock.Options{})
}

func TestTokenLaggingReplicaControlCounterRuleGoesBack(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortControl)
	assertTokenGoesBack(t, failoverToLaggingReplica, lock.Options{UnsafeCounterTokens: true})
}

func TestTokenIncreasesAfterRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	assertTokenIncreases(t, restartWithoutPersistence, lock.Options{})
}

func TestTokenNoPersistenceControlCounterAloneGoesBack(t *testing.T) {
	breakScripts(t, lock.CountingTokens)
	assertTokenGoesBack(t, restartWithoutPersistence, lock.Options{})
}

func TestTokenIncreasesAfterTheCounterExpires(t *testing.T) {
	t.Parallel()
	assertTokenIncreases(t, counterExpired, lock.Options{})
}

func TestTokenCounterExpiredControlCounterAloneGoesBack(t *testing.T) {
	breakScripts(t, lock.CountingTokens)
	assertTokenGoesBack(t, counterExpired, lock.Options{})
}

func TestRedlockTokenIncreasesWhenTheSharedNodeIsStale(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	assertTokenIncreases(t, redlockSharedNodeStale, lock.Options{})
}

func TestRedlockStaleSharedNodeControlCounterRuleGoesBack(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortControl)
	assertTokenGoesBack(t, redlockSharedNodeStale, lock.Options{UnsafeCounterTokens: true})
}

func assertTokenIncreases(t *testing.T, event tokenEvent, opts lock.Options) {
	t.Helper()
	last, next := event(t, opts)
	t.Logf("last token before the loss %d, first after %d", last, next)
	if next <= last {
		t.Errorf("first token after the loss: got %d, want more than %d, the last one issued before", next, last)
	}
}

func assertTokenGoesBack(t *testing.T, event tokenEvent, opts lock.Options) {
	t.Helper()
	last, next := event(t, opts)
	t.Logf("control: last token before the loss %d, first after %d", last, next)
	if next > last {
		t.Errorf("control: first token after the loss %d is still above %d: the event did not make the counter go back, so the test would not catch it", next, last)
	}
}

// acquireTokens acquires and releases "fenced" n times and returns the
// last token.
func acquireTokens(t *testing.T, l *lock.Locker, n int) int64 {
	t.Helper()
	var last int64
	for range n {
		lk := mustAcquire(t, l, "fenced")
		last = lk.Token()
		release(t, lk)
	}
	return last
}

// fenceCounter reads the fence counter of "fenced" (0: missing).
func fenceCounter(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	n, err := c.Get(context.Background(), lockKey("fenced")+":fence").Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return n
}

// staleSnapshotRestart: SAVE, more acquisitions, then a restart that loads
// the snapshot (RDB, Redis's default persistence, taken before the latest
// acquisitions): the counter comes back older.
func staleSnapshotRestart(t *testing.T, opts lock.Options) (last, next int64) {
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, opts)
	acquireTokens(t, l, 5)
	if err := c.Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	last = acquireTokens(t, l, 5)
	srv.Restart()
	if got := fenceCounter(t, c); got == 0 || got >= last {
		t.Fatalf("fence counter after the restart: got %d, want the snapshot's, below %d", got, last)
	}
	return last, acquireTokens(t, l, 1)
}

// failoverToLaggingReplica: the replica stops receiving the master's writes
// (the link is cut), the master issues more tokens, and the clients fail
// over to the replica.
func failoverToLaggingReplica(t *testing.T, opts lock.Options) (last, next int64) {
	ctx := context.Background()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	rc := replica.Client()
	l := newLocker(t, master, opts)
	synced := acquireTokens(t, l, 3)
	eventually(t, 10*time.Second, "the replica to receive the counter", func() bool {
		return fenceCounter(t, rc) == synced
	})
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	last = acquireTokens(t, l, 3)
	if got := fenceCounter(t, rc); got >= last {
		t.Fatalf("the promoted replica's counter: got %d, want one below %d", got, last)
	}
	return last, acquireTokens(t, newLocker(t, replica, opts), 1)
}

// restartWithoutPersistence: the counter is gone after the restart.
func restartWithoutPersistence(t *testing.T, opts lock.Options) (last, next int64) {
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, opts)
	last = acquireTokens(t, l, 5)
	srv.Restart()
	if got := fenceCounter(t, c); got != 0 {
		t.Fatalf("fence counter after a restart without persistence: got %d, want none", got)
	}
	return last, acquireTokens(t, l, 1)
}

// counterExpired: nobody acquires the lock for FenceTTL, and the counter
// expires (Options.FenceTTL, here 200 ms).
func counterExpired(t *testing.T, opts lock.Options) (last, next int64) {
	srv := redistest.Start(t)
	c := srv.Client()
	opts.TTL, opts.FenceTTL = 100*time.Millisecond, 200*time.Millisecond
	l := newLocker(t, srv, opts)
	last = acquireTokens(t, l, 5)
	if ttl := c.PTTL(context.Background(), lockKey("fenced")+":fence").Val(); ttl <= 0 || ttl > opts.FenceTTL {
		t.Fatalf("fence counter's TTL: got %v, want at most %v", ttl, opts.FenceTTL)
	}
	awaitExpired(t, c, lockKey("fenced")+":fence", 10*time.Second)
	return last, acquireTokens(t, l, 1)
}

// redlockSharedNodeStale: Redlock over three masters. While node 2 is
// partitioned from the clients, nodes 0 and 1 form the quorums and their
// counters are raised to the last token. Node 0 then restarts from a
// snapshot taken before those acquisitions, and node 1 is partitioned
// instead: the next quorum, nodes 0 and 2, shares only the stale node 0
// with the last one, and node 2 missed the acquisitions. One node came back
// stale; the others only were unreachable for a while, which Redlock is
// built to bear.
func redlockSharedNodeStale(t *testing.T, opts lock.Options) (last, next int64) {
	nodes := startNodes(t, 3)
	port, err := redisproc.FreePort() // nobody listens: a node cut off
	if err != nil {
		t.Fatal(err)
	}
	cut := "127.0.0.1:" + strconv.Itoa(port)
	addr := func(i int) string { return nodes[i].Addr() }
	// Generous: a slow answer on a loaded machine must not fail the
	// attempt. The cut-off node refuses connections at once.
	opts.NodeTimeout = 500 * time.Millisecond

	acquireTokens(t, redlockOver(t, opts, addr(0), addr(1), addr(2)), 3)
	if err := nodes[0].Client().Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	last = acquireTokens(t, redlockOver(t, opts, addr(0), addr(1), cut), 5)
	nodes[0].Restart()
	for i, c := range []*redis.Client{nodes[0].Client(), nodes[2].Client()} {
		if got := fenceCounter(t, c); got >= last {
			t.Fatalf("node %d's counter: got %d, want one below %d", 2*i, got, last)
		}
	}
	return last, acquireTokens(t, redlockOver(t, opts, addr(0), cut, addr(2)), 1)
}

// redlockOver is a Redlock Locker over the masters at addrs, with clients
// that fail fast, closed when the test ends.
func redlockOver(t *testing.T, opts lock.Options, addrs ...string) *lock.Locker {
	t.Helper()
	var clients []redis.UniversalClient
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	l, err := lock.NewRedlockForTest(clients, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A grant taken by the waiting process's refresh (the grant message was
// lost) when the fence counter is gone (evicted under a volatile-*
// maxmemory policy, or deleted) still gives the process the lock: the
// wait script issues a token by the rule every acquisition follows
// when the counter is missing, the server's clock, and stores it.
// Reporting the place lost instead would leave the lock held by a ticket
// nobody takes until its claim lease ends.
func TestRefreshTakesGrantWhenTheCounterIsMissing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	const ticket = "granted-ticket"
	// A release granted the lock to ticket, with a claim lease; then the
	// counter went.
	if err := admin.Set(ctx, lockKey("res"), ticket, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	clock, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	reply, err := lock.RunWaitScript(ctx, admin, "res", ticket, "pid", "refresh")
	if err != nil {
		t.Fatal(err)
	}
	if len(reply) != 3 || reply[0] != 1 {
		t.Fatalf("refresh of the granted ticket with no counter replied %v, want {1, token, lease}", reply)
	}
	if tok := reply[1]; tok < clock.UnixMicro() {
		t.Errorf("token %d is below the server's clock before the call (%d µs)", tok, clock.UnixMicro())
	}
	if stored, _ := admin.Get(ctx, lockKey("res")+":fence").Int64(); stored != reply[1] {
		t.Errorf("fence counter holds %d, want the token issued, %d", stored, reply[1])
	}
	if pttl := admin.PTTL(ctx, lockKey("res")).Val(); pttl <= 5*time.Second {
		t.Errorf("lease after the refresh took the grant: %v, want the full TTL", pttl)
	}
}
