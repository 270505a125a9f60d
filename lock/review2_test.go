package lock_test

// Reproducers for defects found by the second review of the lock. Each test
// is named after the invariant it shows broken and fails on the code as it
// is; the interleaving is forced with delayed or dropped packets.

import (
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

	"github.com/seckill-ref/seckill/internal/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// delayDropConn, once armed, delays the next request written on it by
// delay (the packet is in flight, as with delayedConn) and, if dropReply is
// set, breaks the connection once the server's reply has come back, as a
// connection reset right after the server answered would: the request ran,
// the client sees an error.
type delayDropConn struct {
	net.Conn
	armed     *atomic.Bool
	delay     time.Duration
	dropReply bool
	drop      atomic.Bool
	wg        sync.WaitGroup
}

func (c *delayDropConn) Write(p []byte) (int, error) {
	if !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	if c.dropReply {
		c.drop.Store(true)
	}
	buf := append([]byte(nil), p...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		time.Sleep(c.delay)
		_ = c.Conn.SetWriteDeadline(time.Time{})
		_, _ = c.Conn.Write(buf)
	}()
	return len(p), nil
}

func (c *delayDropConn) Read(p []byte) (int, error) {
	if !c.drop.Load() {
		return c.Conn.Read(p)
	}
	_ = c.Conn.SetReadDeadline(time.Time{})
	_, err := c.Conn.Read(p) // the reply arrives: the request ran
	_ = c.Conn.Close()
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

func (c *delayDropConn) Close() error {
	go func() {
		c.wg.Wait()
		_ = c.Conn.Close()
	}()
	return nil
}

// requeueRace sets up the interleaving of the tests below: process p holds
// "res" and one more goroutine of p waits for it, so p's Release queues p
// again under a new ticket R in the release script. That request is
// delayed on the network (and its reply lost if dropReply); while it is in
// flight, p gives R up (giveUp: Close, or the waiting goroutine leaves) and
// p's withdraw of R reaches Redis first. Then the delayed release runs. It
// returns p's Release error and a client for checks.
type requeueRace struct {
	t        *testing.T
	srv      *redistest.Server
	admin    *redis.Client
	p        *lock.Locker
	lk       *lock.Lock
	waiter   chan error
	cancelW  context.CancelFunc
	released chan error
	armed    *atomic.Bool
}

func newRequeueRace(t *testing.T, clientOpts redis.Options, dropReply bool, queued func(srv *redistest.Server)) *requeueRace {
	t.Helper()
	srv := redistest.Start(t)
	admin := srv.Client()
	loadScripts(t, admin) // no NOSCRIPT round trip around the delayed request
	r := &requeueRace{t: t, srv: srv, admin: admin, armed: new(atomic.Bool)}
	pc := wrappedClient(t, srv, clientOpts, func(conn net.Conn) net.Conn {
		return &delayDropConn{Conn: conn, armed: r.armed, delay: time.Second, dropReply: dropReply}
	})
	p, err := lock.New(pc, lock.Options{}) // default TTL: 10 s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	r.p = p
	r.lk = mustAcquire(t, p, "res")
	if queued != nil {
		queued(srv)
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.cancelW = cancel
	t.Cleanup(cancel)
	r.waiter = make(chan error, 1)
	go func() {
		lk, err := p.Acquire(wctx, "res")
		if err == nil {
			_ = lk.Release(context.Background())
		}
		r.waiter <- err
	}()
	waitQueued(t, p, "res", 1)
	channel := lockKey("res") + ":grant"
	eventually(t, 10*time.Second, "p's driver to subscribe", func() bool {
		return admin.PubSubNumSub(context.Background(), channel).Val()[channel] >= 1
	})
	r.armed.Store(true) // p's release request is delayed 1 s
	r.released = make(chan error, 1)
	go func() { r.released <- r.lk.Release(context.Background()) }()
	eventually(t, 10*time.Second, "p's release to be sent", func() bool { return !r.armed.Load() })
	return r
}

// voidKeys counts the tombstones of "res": a withdraw of p's requeue ticket
// leaves one before the delayed release (which leaves the owner's) runs.
func (r *requeueRace) voidKeys() int {
	return len(r.admin.Keys(context.Background(), lockKey("res")+":void:*").Val())
}

// After a Locker's Close has returned, and a Release that was in flight
// during it has returned too, no ticket of that Locker may hold the lock:
// Close's doc promises it takes the process out of every queue, because a
// grant to the closed process blocks the lock. Here the Release runs with
// another goroutine of the process waiting, so the release script queues
// the process again under a new ticket R (and, nobody else waiting, grants
// the lock straight to R with the full TTL). Close withdraws R, but its
// withdraw reaches Redis before the delayed release, and the release
// script does not look at R's tombstone: it grants the lock to R. The reply
// is lost (a client with MaxRetries -1, as the tests of ambiguous calls
// use), release() sees an error, and after Close nothing gives R up: the
// lock is held by a closed Locker's ticket for the whole TTL (10 s).
func TestCloseDuringReleaseLeavesNoTicketHoldingTheLock(t *testing.T) {
	r := newRequeueRace(t, redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}, true, nil)
	ctx := context.Background()
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-r.released; err == nil {
		t.Fatal("the release's reply was to be lost, yet Release returned nil: the interleaving was not forced")
	}
	if err := <-r.waiter; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("the waiting goroutine: %v, want ErrClosed", err)
	}
	other := newLocker(t, r.srv, lock.Options{})
	lk, err := other.TryAcquire(ctx, "res")
	if err == nil {
		release(t, lk)
		return
	}
	t.Fatalf("after Close returned and the in-flight Release returned, the lock is held by %q (the released Lock was %q) for another %v: a ticket of the closed Locker holds it",
		r.admin.Get(ctx, lockKey("res")).Val(), r.lk.Owner(), r.admin.PTTL(ctx, lockKey("res")).Val())
}

// The same without Close: the waiting goroutine gives up while its
// process's Release is in flight. The driver drops the requeue ticket R and
// withdraws it; the withdraw reaches Redis first, then the release grants
// the lock to R anyway; its reply is lost, and nothing gives R up: the lock
// is held for the whole TTL by a ticket that nobody in the process wants.
func TestWaiterLeavingDuringReleaseLeavesNoTicketHoldingTheLock(t *testing.T) {
	r := newRequeueRace(t, redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}, true, nil)
	ctx := context.Background()
	r.cancelW()
	if err := <-r.waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting goroutine: %v, want context.Canceled", err)
	}
	eventually(t, 10*time.Second, "the driver's withdraw of the requeue ticket to land", func() bool { return r.voidKeys() >= 1 })
	if err := <-r.released; err == nil {
		t.Fatal("the release's reply was to be lost, yet Release returned nil: the interleaving was not forced")
	}
	other := newLocker(t, r.srv, lock.Options{})
	deadline := time.Now().Add(5 * time.Second) // the driver has that long to clean up
	for {
		lk, err := other.TryAcquire(ctx, "res")
		if err == nil {
			release(t, lk)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the release, the lock is held by %q (the released Lock was %q) for another %v, and nobody in the process wants it",
				r.admin.Get(ctx, lockKey("res")).Val(), r.lk.Owner(), r.admin.PTTL(ctx, lockKey("res")).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A ticket that the process has given up is never queued. With another
// process q waiting in Redis, the delayed release queues p again under R
// behind q (after p's Close withdrew R) and grants the lock to q. Nothing
// is lost on the network and the client is go-redis's default, yet the
// closed Locker's entry stands in the queue, and when q releases within the
// entry's lease the lock is granted to the closed Locker: everybody else
// waits for that grant's claim lease.
func TestCloseDuringReleaseLeavesNoQueueEntry(t *testing.T) {
	var q *lock.Locker
	gotQ := make(chan *lock.Lock, 1)
	r := newRequeueRace(t, redis.Options{}, false, func(srv *redistest.Server) {
		q = newLocker(t, srv, lock.Options{WaitTimeout: 20 * time.Second})
		go func() {
			lk, err := q.Acquire(context.Background(), "res")
			if err != nil {
				t.Error(err)
			}
			gotQ <- lk
		}()
		c := srv.Client()
		eventually(t, 10*time.Second, "q to queue in Redis", func() bool {
			return c.LLen(context.Background(), lockKey("res")+":queue").Val() == 1
		})
	})
	ctx := context.Background()
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-r.released; err != nil {
		t.Fatalf("p's Release: %v", err)
	}
	lkQ := <-gotQ
	if lkQ == nil {
		t.FailNow()
	}
	entries := r.admin.HGetAll(ctx, lockKey("res")+":waiters").Val()
	delete(entries, "turn")
	if len(entries) == 0 {
		release(t, lkQ)
		return
	}
	var ticket string
	for _, e := range entries {
		ticket = e[strings.LastIndexByte(e, ' ')+1:]
	}
	release(t, lkQ) // hands the lock to the next live entry: the closed Locker's
	t.Fatalf("after Close returned, the closed Locker still stands in the queue (%v); q's release then granted the lock to %q (its ticket %q), PTTL %v",
		entries, r.admin.Get(ctx, lockKey("res")).Val(), ticket, r.admin.PTTL(ctx, lockKey("res")).Val())
}

// netScript is a sequence of faults applied to the successive script calls
// (EVALSHA, EVAL) written on a client's connections; once it runs out, they
// pass.
type netScript struct {
	mu      sync.Mutex
	steps   []netStep
	sent    atomic.Int32 // steps applied so far
	replied atomic.Int32 // replies read to delayed requests
}

type netStep struct {
	delay     time.Duration // the request is in flight this long
	dropReply bool          // the connection breaks once the reply has come
}

func (s *netScript) next() (netStep, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.steps) == 0 {
		return netStep{}, false
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	s.sent.Add(1)
	return st, true
}

// scriptedConn applies a netScript to the requests written on it.
type scriptedConn struct {
	net.Conn
	script  *netScript
	pubsub  atomic.Bool
	drop    atomic.Bool
	waiting atomic.Bool // a delayed request's reply is due
	wg      sync.WaitGroup
}

func (c *scriptedConn) Write(p []byte) (int, error) {
	if strings.Contains(strings.ToLower(string(p)), "subscribe") {
		c.pubsub.Store(true)
	}
	if c.pubsub.Load() || !strings.Contains(strings.ToLower(string(p)), "eval") {
		return c.Conn.Write(p) // connection set-up, Pub/Sub: not the lock's requests
	}
	st, ok := c.script.next()
	if !ok || (st.delay == 0 && !st.dropReply) {
		return c.Conn.Write(p)
	}
	if st.dropReply {
		c.drop.Store(true)
	} else {
		c.waiting.Store(true)
	}
	buf := append([]byte(nil), p...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		time.Sleep(st.delay)
		_ = c.Conn.SetWriteDeadline(time.Time{})
		_, _ = c.Conn.Write(buf)
	}()
	return len(p), nil
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	if !c.drop.Load() {
		n, err := c.Conn.Read(p)
		if n > 0 && c.waiting.CompareAndSwap(true, false) {
			c.script.replied.Add(1)
		}
		return n, err
	}
	_ = c.Conn.SetReadDeadline(time.Time{})
	_, err := c.Conn.Read(p)
	_ = c.Conn.Close()
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

func (c *scriptedConn) Close() error {
	go func() {
		c.wg.Wait()
		_ = c.Conn.Close()
	}()
	return nil
}

// A released Lock's owner never holds the lock again, and no ticket is
// granted twice. go-redis runs a command again when its reply is lost
// (MaxRetries defaults to 3). Here the driver's registration (acquire,
// mode '1', ticket T) runs, its reply is lost, and go-redis's retry is
// delayed on the network. Meanwhile the holder releases, T is granted with
// a claim lease, the grant message reaches p and becomes Lock L; L's
// extension is slow, the claim runs out, L reports the loss, and its
// goroutine releases it (the key is gone by then, so the release leaves no
// tombstone for T). Then the retried registration arrives: nothing stops it
// from queueing T again, and with nobody else queued the script grants T
// the lock with the full TTL. The driver has moved on from T and ignores
// the reply: the lock is held for the whole TTL by the owner of a Lock that
// was released.
func TestRetriedRegistrationNeverRegrantsAReleasedTicket(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)
	script := &netScript{steps: []netStep{
		{},                               // p's first attempt (mode '0'): finds the lock held
		{dropReply: true},                // the registration (mode '1', T) runs; its reply is lost
		{delay: 1500 * time.Millisecond}, // go-redis's retry of it is delayed 1.5 s
		{delay: 1000 * time.Millisecond}, // L's extension is delayed 1 s, past the claim lease
	}}
	pc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &scriptedConn{Conn: conn, script: script}
	})
	p, err := lock.New(pc, lock.Options{WaitTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	h := newLocker(t, srv, lock.Options{})
	lkH := mustAcquire(t, h, "res")

	got := make(chan *lock.Lock, 1)
	go func() {
		lk, err := p.Acquire(ctx, "res")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	eventually(t, 10*time.Second, "the retry of p's registration to be sent", func() bool { return script.sent.Load() >= 3 })
	if n := admin.LLen(ctx, lockKey("res")+":queue").Val(); n != 1 {
		t.Fatalf("queue length %d, want p's one entry: the interleaving was not forced", n)
	}
	release(t, lkH) // grants T to p, with a claim lease
	var lk *lock.Lock
	select {
	case lk = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("p never got the grant")
	}
	if lk == nil {
		t.FailNow()
	}
	select {
	case <-lk.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("L's claim lease ran out unextended, yet Lost never closed")
	}
	awaitExpired(t, admin, lockKey("res"), 10*time.Second)
	if err := lk.Release(ctx); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("L.Release = %v, want ErrLeaseLost", err)
	}
	// The delayed extension and then the retried registration land, 1 s
	// and 1.5 s after they were sent, and are answered.
	eventually(t, 10*time.Second, "the retried registration to be answered", func() bool { return script.replied.Load() >= 2 })
	if owner := admin.Get(ctx, lockKey("res")).Val(); owner == lk.Owner() {
		t.Fatalf("the lock is held by %q, the owner of Lock L, which was released; for another %v, and nobody will release it",
			owner, admin.PTTL(ctx, lockKey("res")).Val())
	}
	if e := admin.HGetAll(ctx, lockKey("res")+":waiters").Val(); len(e) > 0 {
		for pid, v := range e {
			if strings.HasSuffix(v, lk.Owner()) {
				t.Fatalf("the released Lock's ticket %q is queued again (%s: %s)", lk.Owner(), pid, v)
			}
		}
	}
}

// Lock.Deadline is a time until which the lease certainly lasts in Redis.
// The scripts get the TTL in whole milliseconds (TTL.Milliseconds()), but
// Extend computes the deadline as its send time plus the full TTL: with a
// TTL that is not a whole number of milliseconds (any TTL of at least 10 ms
// is accepted), the deadline after every renewal is up to a millisecond
// later than the key's expiry, and another process can take the lock while
// this Lock still reports it valid. The test extends, then polls the key:
// Redis answering that it is gone before Deadline shows the overshoot.
// (The claim lease of a grant has the same rounding: 5 x RecheckInterval
// is sent as whole milliseconds, the deadline adds the exact duration.)
func TestDeadlineAfterExtendIsNoLaterThanTheKeysExpiry(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	const ttl = 10*time.Millisecond + 900*time.Microsecond
	l := newLocker(t, srv, lock.Options{TTL: ttl, DisableRenewal: true})
	for trial := range 50 {
		lk := mustAcquire(t, l, "res")
		if err := lk.Extend(ctx); err != nil {
			_ = lk.Release(ctx)
			continue // the machine was too slow for this trial
		}
		deadline := lk.Deadline()
		for time.Now().Before(deadline) {
			n, err := admin.Exists(ctx, lockKey("res")).Result()
			answered := time.Now()
			if err == nil && n == 0 && answered.Before(deadline) {
				t.Fatalf("trial %d: the Lock's Deadline is %v after Redis answered that the key had expired (TTL %v, sent to Redis as %d ms)",
					trial, deadline.Sub(answered), ttl, ttl.Milliseconds())
			}
		}
		_ = lk.Release(ctx)
	}
}
