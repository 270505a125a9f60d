package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// A ticket the process has withdrawn is never queued and never holds the
// lock: nobody would take the grant, and the lock would be blocked for its
// lease. Here the ticket is the one a Release queues the process under when
// another of its goroutines waits (the requeue ticket R). The release
// request is delayed on the network; while it is in flight the process
// gives R up (Close, or the waiting goroutine leaves), and that withdraw
// reaches Redis first. The release script must then see R's tombstone. The
// controls let the release script ignore that tombstone: the lock goes to R
// (or R is queued), and each test fails.

func TestCloseDuringReleaseLeavesNoTicketHoldingTheLock(t *testing.T) {
	t.Parallel()
	if err := closeDuringRelease(t); err != nil {
		t.Error(err)
	}
}

func TestCloseDuringReleaseControlRequeueIgnoresTombstone(t *testing.T) {
	mustCatch(t, scriptRule(lock.IgnoreRequeueTombstone),
		"a release that queues a given-up ticket passed the check: the test would not catch it", closeDuringRelease)
}

func TestWaiterLeavingDuringReleaseLeavesNoTicketHoldingTheLock(t *testing.T) {
	t.Parallel()
	if err := waiterLeavesDuringRelease(t); err != nil {
		t.Error(err)
	}
}

func TestWaiterLeavingDuringReleaseControlRequeueIgnoresTombstone(t *testing.T) {
	mustCatch(t, scriptRule(lock.IgnoreRequeueTombstone),
		"a release that grants the lock to a given-up ticket passed the check: the test would not catch it", waiterLeavesDuringRelease)
}

func TestCloseDuringReleaseLeavesNoQueueEntry(t *testing.T) {
	t.Parallel()
	if err := closeDuringReleaseWithOthersQueued(t); err != nil {
		t.Error(err)
	}
}

func TestCloseDuringReleaseQueueControlRequeueIgnoresTombstone(t *testing.T) {
	mustCatch(t, scriptRule(lock.IgnoreRequeueTombstone),
		"a release that queues a given-up ticket passed the check: the test would not catch it", closeDuringReleaseWithOthersQueued)
}

// closeDuringRelease: after a Locker's Close has returned, and a Release
// that was in flight during it has returned too, no ticket of that Locker
// may hold the lock (Close's doc promises it takes the process out of every
// queue). Nobody else waits, so the release script would grant the lock
// straight to R with the full TTL; the reply is lost (the client does not
// retry, as in the tests of ambiguous calls).
func closeDuringRelease(t *testing.T) error {
	r := newRequeueRace(t, redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}, true, nil)
	ctx := context.Background()
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	r.forcedAfter("Close")
	<-r.released
	r.ran()
	if err := <-r.waiter; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("the waiting goroutine: %v, want ErrClosed", err)
	}
	other := newLocker(t, r.srv, lock.Options{})
	lk, err := other.TryAcquire(ctx, "res")
	if err == nil {
		release(t, lk)
		return nil
	}
	return fmt.Errorf("after Close returned and the in-flight Release returned, the lock is held by %q (the released Lock was %q) for another %v: a ticket of the closed Locker holds it",
		holder(r.admin, "res"), r.lk.Owner(), r.admin.PTTL(ctx, lockKey("res")).Val())
}

// waiterLeavesDuringRelease: the same without Close. The waiting goroutine
// leaves while its process's Release is in flight; the driver drops R and
// withdraws it. If the release then granted the lock to R, with its reply
// lost, nothing in the process would withdraw R: the lock would be held for
// the whole TTL by a ticket nobody wants.
func waiterLeavesDuringRelease(t *testing.T) error {
	r := newRequeueRace(t, redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}, true, nil)
	ctx := context.Background()
	r.cancelW()
	if err := <-r.waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting goroutine: %v, want context.Canceled", err)
	}
	eventually(t, 10*time.Second, "the driver's withdraw of the requeue ticket to land", func() bool { return r.tombstones() >= 1 })
	r.forcedAfter("the withdraw")
	<-r.released
	r.ran()
	other := newLocker(t, r.srv, lock.Options{})
	deadline := time.Now().Add(5 * time.Second) // the driver has that long to withdraw R
	for {
		lk, err := other.TryAcquire(ctx, "res")
		if err == nil {
			release(t, lk)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("5 s after the release, the lock is held by %q (the released Lock was %q) for another %v, and nobody in the process wants it",
				holder(r.admin, "res"), r.lk.Owner(), r.admin.PTTL(ctx, lockKey("res")).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closeDuringReleaseWithOthersQueued: another process q waits in Redis, so
// the delayed release would queue p under R behind q (after p's Close
// withdrew R) and grant the lock to q. Nothing is lost on the network and
// the client is go-redis's default; if the closed Locker's entry stood in
// the queue, q's release within the entry's lease would grant the lock to
// the closed Locker, and everybody else would wait for that grant's claim
// lease.
func closeDuringReleaseWithOthersQueued(t *testing.T) error {
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
	r.forcedAfter("Close")
	if err := <-r.released; err != nil {
		t.Fatalf("p's Release: %v", err)
	}
	lkQ := <-gotQ
	if lkQ == nil {
		t.FailNow()
	}
	entries := r.admin.HGetAll(ctx, lockKey("res")+":waiters").Val()
	if len(entries) == 0 {
		release(t, lkQ)
		return nil
	}
	release(t, lkQ) // hands the lock to the next live entry: the closed Locker's
	return fmt.Errorf("after Close returned, the closed Locker still stands in the queue (%v); q's release then granted the lock to %q, PTTL %v",
		entries, holder(r.admin, "res"), r.admin.PTTL(ctx, lockKey("res")).Val())
}

// requeueRace sets up the interleaving of the tests above: process p holds
// "res" and one more goroutine of p waits for it, so p's Release queues p
// again under a new ticket R in the release script. That request is
// delayed on the network by requeueDelay (and its reply lost if
// dropReply); while it is in flight, the test has p give R up.
type requeueRace struct {
	t         *testing.T
	srv       *redistest.Server
	admin     *redis.Client
	p         *lock.Locker
	lk        *lock.Lock
	waiter    chan error
	cancelW   context.CancelFunc
	released  chan error
	armed     *atomic.Bool
	delivered *atomic.Bool // the delayed request has been written
	dropped   *atomic.Bool // a reply was lost
	requeued  *atomic.Bool // the delayed release carried a ticket to queue
}

const requeueDelay = time.Second

func newRequeueRace(t *testing.T, clientOpts redis.Options, dropReply bool, queued func(srv *redistest.Server)) *requeueRace {
	t.Helper()
	srv := redistest.Start(t)
	admin := srv.Client()
	loadScripts(t, admin) // no NOSCRIPT round trip around the delayed request
	r := &requeueRace{t: t, srv: srv, admin: admin, armed: new(atomic.Bool), delivered: new(atomic.Bool), dropped: new(atomic.Bool), requeued: new(atomic.Bool)}
	pc := wrappedClient(t, srv, clientOpts, func(conn net.Conn) net.Conn {
		return &delayDropConn{inFlight: inFlight{Conn: conn}, armed: r.armed, delivered: r.delivered, dropped: r.dropped, requeued: r.requeued, delay: requeueDelay, dropReply: dropReply}
	})
	p := newLockerOn(t, pc, lock.Options{}) // default TTL: 10 s
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
	// A release queues p only once p listens for grants.
	eventually(t, 10*time.Second, "p's driver to listen for grants", func() bool { return p.Listening("res") })
	r.armed.Store(true) // p's next release request is delayed
	r.released = make(chan error, 1)
	go func() { r.released <- r.lk.Release(context.Background()) }()
	eventually(t, 10*time.Second, "p's release to be sent", func() bool { return !r.armed.Load() })
	if !r.requeued.Load() {
		t.Fatal("fault not injected: p's release queued no ticket R")
	}
	return r
}

// forcedAfter fails the test if the delayed release request has already
// reached the server when step (which was to overtake it) is done: the
// machine was too slow for the delay, and the test would test nothing.
func (r *requeueRace) forcedAfter(step string) {
	r.t.Helper()
	if r.delivered.Load() {
		r.t.Fatalf("the delayed release reached Redis before %s was done: the interleaving was not forced", step)
	}
}

// ran fails the test unless the delayed release ran and its reply was lost.
func (r *requeueRace) ran() {
	r.t.Helper()
	if !r.dropped.Load() {
		r.t.Fatal("the release's reply was to be lost, and was not: the interleaving was not forced")
	}
	if owner := holder(r.admin, "res"); owner == r.lk.Owner() {
		r.t.Fatal("the released Lock still holds the lock: the delayed release never ran")
	}
}

// tombstones counts the tombstones of "res": a withdraw of p's requeue ticket
// leaves one before the delayed release runs.
func (r *requeueRace) tombstones() int {
	return len(r.admin.Keys(context.Background(), lockKey("res")+":tombstone:*").Val())
}

// delayDropConn, once armed, delays the next release request written on it
// by delay (the packet is in flight, as with delayedConn) and, if dropReply is
// set, breaks the connection once the server's reply has come back, as a
// connection reset right after the server answered would: the request ran,
// the client sees an error.
type delayDropConn struct {
	inFlight
	armed     *atomic.Bool
	delivered *atomic.Bool
	dropped   *atomic.Bool
	requeued  *atomic.Bool
	delay     time.Duration
	dropReply bool
	drop      atomic.Bool
}

func (c *delayDropConn) Write(p []byte) (int, error) {
	script, requeue, _ := lock.ScriptCall(parseCommand(p))
	if script != "release" || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	if requeue != "" {
		c.requeued.Store(true)
	}
	if c.dropReply {
		c.drop.Store(true)
	}
	return c.later(p, c.delay, func() { c.delivered.Store(true) })
}

func (c *delayDropConn) Read(p []byte) (int, error) {
	if !c.drop.Load() {
		return c.Conn.Read(p)
	}
	n, err := readThenBreak(c.Conn, p)
	c.dropped.Store(true)
	return n, err
}
