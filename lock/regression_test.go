package lock_test

// Tests of invariants that only a precise interleaving can break. Each
// forces its interleaving with delayed or dropped packets (or a test
// hook), so that it is reproduced every run, not hoped for.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// A Locker forgets a name once nobody here holds or awaits it, also after
// a hand-off between two of its goroutines. The driver sleeps with no
// timer while a local goroutine holds the lock; unless the last release
// wakes it (handoff's line.tend wakes a running driver after every event),
// the line would stay in the Locker's map with its goroutine and its
// Pub/Sub channel, and every later TryAcquire of the name in this process
// would fail with "held or awaited in this process" although the lock is
// free.
func TestQueueForgottenAfterLocalHandOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, lock.Options{})
	ctx := context.Background()
	channel := lockKey("res") + ":grant"

	first := mustAcquire(t, l, "res")
	got := acquireAsync(t, ctx, l, "res")
	waitQueued(t, l, "res", 1)
	awaitSubscribed(t, c, "res") // the driver's first step (it subscribes in the busy case)
	release(t, first)            // hands over in-process, through the release reply
	second := <-got
	if second == nil {
		t.FailNow()
	}
	release(t, second) // nobody waits, nobody holds: the lock is free

	deadline := time.Now().Add(time.Second)
	for {
		lk, err := l.TryAcquire(ctx, "res")
		if err == nil {
			release(t, lk)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("1s after the last Release of a free lock: TryAcquire = %v; GET lock = %q; still subscribed to %d channel(s)",
				err, holder(c, "res"), c.PubSubNumSub(ctx, channel).Val()[channel])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close withdraws the ticket the process is queued under. Otherwise a
// release by another process within the entry's lease (5 x
// RecheckInterval) grants the lock to a ticket of a closed Locker, and the
// lock is stuck for a full TTL although nobody holds it.
func TestCloseWithdrawsQueuedTicket(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	a := newLocker(t, srv, lock.Options{})
	b := newLocker(t, srv, lock.Options{RecheckInterval: time.Second, WaitTimeout: -1})
	other := newLocker(t, srv, lock.Options{})

	lkA := mustAcquire(t, a, "res")
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, "res")
		done <- err
	}()
	eventually(t, 5*time.Second, "b to queue in Redis", func() bool {
		return c.LLen(ctx, lockKey("res")+":queue").Val() == 1
	})
	if err := b.Close(); err != nil { // graceful shutdown of process b
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("b's Acquire = %v, want ErrClosed", err)
	}
	release(t, lkA)

	lk, err := other.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatalf("after a clean Close of the only waiter and the holder's Release, TryAcquire = %v; "+
			"the lock is held by %q (PTTL %v): a ticket of the closed Locker", err,
			holder(c, "res"), c.PTTL(ctx, lockKey("res")).Val())
	}
	release(t, lk)
}

// A grant for a ticket being withdrawn is never handed to a goroutine. The
// driver withdraws its ticket when the last local waiter leaves; a
// goroutine that calls Acquire while that withdraw is in flight is queued
// locally, and a grant for the old ticket may arrive meanwhile. Handed to
// the new goroutine, it would make a live Lock (Lost open, Err nil) of a
// lock the withdraw then deletes and passes to somebody else. The ticket
// leaves line.ticket before the withdraw is sent (handoff's dropTicket),
// so the line finds the grant message stale.
//
// The withdraw is delayed on the network (150 ms, as in
// TestLateAcquireAfterWithdrawIsRefused), which makes the interleaving
// deterministic.
func TestGrantDuringWithdrawIsNotHandedOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)

	var armed atomic.Bool
	pc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &delayedConn{inFlight: inFlight{Conn: conn}, armed: &armed, delay: 300 * time.Millisecond}
	})
	p := newLockerOn(t, pc, lock.Options{RecheckInterval: time.Minute, WaitTimeout: -1})
	q := newLocker(t, srv, lock.Options{})
	r := newLocker(t, srv, lock.Options{})

	lkQ := mustAcquire(t, q, "res")

	// W1 of process p waits; p's driver queues p under ticket T.
	ctx1, cancel1 := context.WithCancel(ctx)
	w1 := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx1, "res")
		w1 <- err
	}()
	awaitRedisQueue(t, admin, "res", true)

	// W1 gives up: the driver sends withdraw(T); its packet is delayed.
	entry := admin.HGetAll(ctx, lockKey("res")+":waiters").Val()
	if len(entry) != 1 {
		t.Fatalf("waiters = %v, want p's one entry", entry)
	}
	var ticketT string
	for _, v := range entry {
		ticketT = v[strings.LastIndexByte(v, ' ')+1:]
	}
	armed.Store(true)
	cancel1()
	if err := <-w1; !errors.Is(err, context.Canceled) {
		t.Fatalf("W1: %v", err)
	}
	eventually(t, 5*time.Second, "the driver to send the withdraw", func() bool { return !armed.Load() })
	// W2 arrives while the withdraw is in flight: queued locally.
	w2 := acquireAsync(t, ctx, p, "res")
	waitQueued(t, p, "res", 1)
	// q releases: Redis grants the lock to T (still queued) and publishes.
	release(t, lkQ)
	var lkP *lock.Lock
	select {
	case lkP = <-w2:
	case <-time.After(5 * time.Second):
		t.Fatal("W2 did not get the lock")
	}
	if lkP == nil {
		t.FailNow()
	}
	defer func() { _ = lkP.Release(ctx) }()

	// Whatever the order in which the delayed withdraw(T), the grant to T
	// and W2's own registration land, W2's Lock must be the one Redis
	// holds, and nobody else may get in.
	eventually(t, 5*time.Second, "the delayed withdraw(T) to land", func() bool {
		return admin.Exists(ctx, lockKey("res")+":tombstone:"+ticketT).Val() == 1
	})
	if got := holder(admin, "res"); got != lkP.Owner() {
		t.Fatalf("W2's live Lock %q is not the lock's owner in Redis (%q)", lkP.Owner(), got)
	}
	if lkR, err := r.TryAcquire(ctx, "res"); err == nil {
		_ = lkR.Release(ctx)
		t.Fatalf("two holders: W2 holds %q (token %d) and r got %q (token %d)", lkP.Owner(), lkP.Token(), lkR.Owner(), lkR.Token())
	}
}

// A Lock reports its loss at its deadline, also while a renewal hangs.
// go-redis ignores a context's deadline for socket I/O unless the client
// sets ContextTimeoutEnabled (the default client waits ReadTimeout, 3 s),
// so a renewal can outlast the lease. The watchdog keeps the deadline
// scheduled while a renewal is in flight (Lock.nextEvent); otherwise the
// lease would run out in Redis, another process would acquire, and this
// Lock would still report nothing: Lost open, Err nil, contexts live,
// past its own Deadline.
func TestLossReportedWhileRenewalHangs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)

	var armed atomic.Bool
	hc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &delayedConn{inFlight: inFlight{Conn: conn}, armed: &armed, delay: time.Second}
	})
	const ttl = 300 * time.Millisecond
	holder := newLockerOn(t, hc, lock.Options{TTL: ttl})
	other := newLocker(t, srv, lock.Options{})

	lk := mustAcquire(t, holder, "res")
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	armed.Store(true) // the first renewal (after TTL/3) is delayed 1 s on the network

	awaitExpired(t, admin, lockKey("res"), 5*time.Second)
	lkO, err := other.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatalf("other.TryAcquire after the holder's lease ran out: %v", err)
	}
	defer func() { _ = lkO.Release(ctx) }()
	// Without the scheduled deadline, Lost would close only when the hung
	// renewal returns, about 1.1 s after the acquisition and 0.8 s after
	// the Deadline; 400 ms of slack tells the two apart on a loaded machine.
	if !lostBy(lk, lk.Deadline().Add(400*time.Millisecond)) {
		t.Fatalf("two holders: other holds token %d; the holder's Deadline passed %v ago, yet Lost is open, Err = %v, ctx.Err = %v",
			lkO.Token(), time.Since(lk.Deadline()).Round(time.Millisecond), lk.Err(), lctx.Err())
	}
}

// Context on a released Lock returns a context that is already done, with
// cause ErrNotHeld (Release clears the Lock's map of derived contexts;
// Context must not write to it).
func TestContextOfReleasedLockIsDone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLocker(t, srv, lock.Options{})
	lk := mustAcquire(t, l, "res")
	release(t, lk)
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Lock.Context after Release panicked: %v", r)
		}
	}()
	ctx, cancel := lk.Context(context.Background())
	defer cancel()
	if ctx.Err() == nil || !errors.Is(context.Cause(ctx), lock.ErrNotHeld) {
		t.Errorf("context of a released Lock: err %v, cause %v; want done, with cause ErrNotHeld", ctx.Err(), context.Cause(ctx))
	}
}

// A Release whose reply is lost reports that it released, and leaves the
// lock free for the next holder. go-redis sends a command again when its
// reply was lost to a broken connection (io.EOF; MaxRetries defaults to
// 3), EVALSHA included, and the release script is not idempotent: run
// twice, the second run finds the lock already granted to the requeue
// ticket T and queues this process again under T; Release would report
// ErrNotHeld, and the stale entry (pid, T) would later be granted to T
// again, silently (a grant to the caller's own process is not published),
// leaving the lock stuck for a full TTL. So a release is never sent twice
// by go-redis (runOnce); after a lost reply the Locker withdraws T and asks
// again without a ticket to queue.
func TestRetriedReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)

	var armed atomic.Bool
	pc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &replyDropConn{Conn: conn, armed: &armed}
	})
	p := newLockerOn(t, pc, lock.Options{RecheckInterval: 300 * time.Millisecond})
	other := newLocker(t, srv, lock.Options{})

	g1 := mustAcquire(t, p, "res")
	got := acquireAsync(t, ctx, p, "res")
	waitQueued(t, p, "res", 1)
	awaitSubscribed(t, admin, "res")

	armed.Store(true) // the reply to the next command written is lost
	if err := g1.Release(ctx); err != nil {
		t.Errorf("g1.Release, retried by go-redis after its reply was lost = %v, want nil: the first run released", err)
	}
	var g2 *lock.Lock
	select {
	case g2 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("g2 never got the lock")
	}
	if g2 == nil {
		t.FailNow()
	}
	t.Logf("queue after the hand-off: %v %v", admin.LRange(ctx, lockKey("res")+":queue", 0, -1).Val(), admin.HGetAll(ctx, lockKey("res")+":waiters").Val())
	if err := g2.Release(ctx); err != nil {
		t.Errorf("g2.Release: %v", err)
	}
	lk, err := other.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatalf("after the last holder released, TryAcquire = %v; the lock is held by %q (g2 was %q) for PTTL %v",
			err, holder(admin, "res"), g2.Owner(), admin.PTTL(ctx, lockKey("res")).Val())
	}
	release(t, lk)
}

// A release whose reply was lost is asked again without a ticket to queue,
// and that second call finds the lock gone: the first released it, and no
// tombstone says so. Until its deadline the key could only have been
// deleted by its owner, so a second call answered before the deadline
// means the first released: Release reports success. The control reports
// only what the second call saw, and Release says the lock was not held.

func TestReleaseWithLostReplyReportsReleased(t *testing.T) {
	t.Parallel()
	if err := releaseWithLostReply(t); err != nil {
		t.Errorf("Release whose first reply was lost = %v, want nil: the first call released", err)
	}
}

func TestReleaseWithLostReplyControlNoInference(t *testing.T) {
	skipInShort(t, shortControl)
	t.Cleanup(lock.NoReleaseInference()) // restored after the test's Lockers are closed
	err := releaseWithLostReply(t)
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("control: Release = %v, want ErrNotHeld: the test would not catch a release that reports only what it saw", err)
	}
	t.Logf("control: %v", err)
}

// releaseWithLostReply acquires "res", loses the reply to its release, and
// returns Release's error, once the lock is checked to be gone.
func releaseWithLostReply(t *testing.T) error {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)
	var armed atomic.Bool
	c := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &replyDropConn{Conn: conn, armed: &armed}
	})
	l := newLockerOn(t, c, lock.Options{})
	lk := mustAcquire(t, l, "res")
	armed.Store(true)
	err := lk.Release(ctx)
	if n := admin.Exists(ctx, lockKey("res")).Val(); n != 0 {
		t.Fatalf("the lock is still there after Release (%v)", err)
	}
	return err
}

// replyDropConn, once armed, lets the next command written on it reach the
// server and run, then breaks the connection instead of returning the
// reply, as a connection reset right after the server answered would.
type replyDropConn struct {
	net.Conn
	armed *atomic.Bool
	drop  atomic.Bool
}

func (c *replyDropConn) Write(p []byte) (int, error) {
	if c.armed.CompareAndSwap(true, false) {
		c.drop.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *replyDropConn) Read(p []byte) (int, error) {
	if !c.drop.Load() {
		return c.Conn.Read(p)
	}
	_, err := c.Conn.Read(p) // the reply arrives: the command ran
	_ = c.Conn.Close()
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

// A subscription whose connection went silent is replaced. A connection
// that dies without a FIN (a peer gone, a NAT timeout) looks silent, and
// every grant would then wait for the re-check, here a minute away. The
// health check pings a silent subscription and replaces it when the ping
// goes unanswered.
func TestSilentSubscriptionIsReplaced(t *testing.T) {
	t.Cleanup(lock.SetHealthInterval(100 * time.Millisecond)) // restored after the test's Lockers are closed
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	var mu sync.Mutex
	var conns []*silenceableConn
	wc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		sc := &silenceableConn{Conn: conn}
		mu.Lock()
		conns = append(conns, sc)
		mu.Unlock()
		return sc
	})
	waiter := newLockerOn(t, wc, lock.Options{RecheckInterval: time.Minute, WaitTimeout: 10 * time.Second})
	holder := newLocker(t, srv, lock.Options{})

	lk := mustAcquire(t, holder, "res")
	got := make(chan error, 1)
	go func() {
		wlk, err := waiter.Acquire(ctx, "res")
		if err == nil {
			err = wlk.Release(ctx)
		}
		got <- err
	}()
	awaitRedisQueue(t, admin, "res", true)
	channel := lockKey("res") + ":grant"
	before := pubsubClientIDs(t, admin)
	// The waiter's Pub/Sub connection goes silent: messages stop arriving,
	// though nothing is closed.
	mu.Lock()
	for _, c := range conns {
		if c.pubsub.Load() {
			c.silent.Store(true)
		}
	}
	mu.Unlock()
	eventually(t, 5*time.Second, "the waiter to replace its silent subscription", func() bool {
		ids := pubsubClientIDs(t, admin)
		for id := range ids {
			if !before[id] {
				return admin.PubSubNumSub(ctx, channel).Val()[channel] >= 1
			}
		}
		return false
	})
	release(t, lk)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the grant did not reach the waiter through its new subscription")
	}
}

// pubsubClientIDs are the ids of the server's Pub/Sub connections.
func pubsubClientIDs(t *testing.T, c *redis.Client) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, line := range strings.Split(c.ClientList(context.Background()).Val(), "\n") {
		if !strings.Contains(line, "cmd=subscribe") && !strings.Contains(line, "sub=1") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				ids[id] = true
			}
		}
	}
	return ids
}

// silenceableConn, once silent, swallows everything it reads: to its user
// the peer has gone quiet, and reads end only at their deadline. It notes
// whether it carries a subscription.
type silenceableConn struct {
	net.Conn
	silent atomic.Bool
	pubsub atomic.Bool
}

func (c *silenceableConn) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("subscribe")) {
		c.pubsub.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *silenceableConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if !c.silent.Load() || err != nil {
			return n, err
		}
	}
}
