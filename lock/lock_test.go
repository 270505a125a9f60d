package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

func TestAcquireWritesOwnerLeaseAndToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, lock.Options{TTL: 5 * time.Second})
	ctx := context.Background()

	lk := mustAcquire(t, l, "p1")
	if got, _ := c.Get(ctx, lockKey("p1")).Result(); got != lk.Owner() {
		t.Errorf("lock value = %q, want owner %q", got, lk.Owner())
	}
	if pttl := c.PTTL(ctx, lockKey("p1")).Val(); pttl <= 0 || pttl > 5*time.Second {
		t.Errorf("PTTL = %v, want a lease of at most 5s set with the lock", pttl)
	}
	if got, _ := c.Get(ctx, lockKey("p1")+":fence").Int64(); got != lk.Token() {
		t.Errorf("fence counter = %d, want the token %d", got, lk.Token())
	}
	release(t, lk)
	if n := c.Exists(ctx, lockKey("p1")).Val(); n != 0 {
		t.Errorf("lock key still exists after Release")
	}
	lk2 := mustAcquire(t, l, "p1")
	defer release(t, lk2)
	if lk2.Owner() == lk.Owner() {
		t.Errorf("two acquisitions share owner %q; each needs a fresh UUID", lk.Owner())
	}
}

// Requirement 1: two Lockers on separate clients, 64 goroutines, one key:
// never two holders at once.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lockers := []*lock.Locker{
		newLocker(t, srv, lock.Options{}),
		newLocker(t, srv, lock.Options{}),
	}
	var holders, maxHolders, total atomic.Int64
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%2]
			for range 15 {
				err := l.Do(context.Background(), "hot", func(ctx context.Context, _ *lock.Lock) error {
					n := holders.Add(1)
					for {
						m := maxHolders.Load()
						if n <= m || maxHolders.CompareAndSwap(m, n) {
							break
						}
					}
					total.Add(1)
					busy(50 * time.Microsecond)
					holders.Add(-1)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Do: %v", err)
	}
	if m := maxHolders.Load(); m != 1 {
		t.Errorf("at most %d goroutines held the lock at once, want 1", m)
	}
	if n := total.Load(); n != 64*15 {
		t.Errorf("%d critical sections ran, want %d", n, 64*15)
	}
}

// Requirement 2: a holder whose lease expired cannot release its
// successor's lock.
func TestOnlyOwnerReleases(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	a := newLocker(t, srv, lock.Options{TTL: 150 * time.Millisecond, DisableRenewal: true})
	b := newLocker(t, srv, lock.Options{})
	ctx := context.Background()

	lkA := mustAcquire(t, a, "res")
	awaitExpired(t, c, lockKey("res"), 5*time.Second)
	lkB := mustAcquire(t, b, "res")

	err := lkA.Release(ctx)
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("late Release = %v, want ErrNotHeld", err)
	}
	if got := holder(c, "res"); got != lkB.Owner() {
		t.Fatalf("after A's late Release the lock holds %q, want B's owner %q", got, lkB.Owner())
	}
	if err := lkB.Extend(ctx); err != nil {
		t.Errorf("B's Extend after A's late Release: %v", err)
	}
	if err := lkA.Extend(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("A's Extend = %v, want ErrNotHeld", err)
	}
	release(t, lkB)
}

// Requirement 3: a holder that never releases (it crashed) is taken over by
// a waiter once its lease runs out, within TTL plus a small bound.
func TestCrashedHolderTakenOver(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	crashed, err := lock.New(srv.Client(), lock.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	waiter := newLocker(t, srv, lock.Options{WaitTimeout: 5 * time.Second})

	start := time.Now()
	if _, err := crashed.Acquire(context.Background(), "res"); err != nil {
		t.Fatal(err)
	}
	// The process dies: no release, no renewal.
	if err := crashed.Close(); err != nil {
		t.Fatal(err)
	}
	lk := mustAcquire(t, waiter, "res")
	defer release(t, lk)
	took := time.Since(start)
	// The bound: the lease, plus the re-check after it (at most
	// pttl/4 + 2 ms late), plus scheduling slack for a loaded CI machine.
	if bound := ttl + 500*time.Millisecond; took > bound {
		t.Errorf("waiter took over after %v, want within %v", took, bound)
	}
	if took < ttl-50*time.Millisecond {
		t.Errorf("waiter took over after %v, before the crashed holder's %v lease ended", took, ttl)
	}
}

// Requirement 4a: renewal keeps a critical section of 5 x TTL exclusive.
// The TTL leaves each renewal (every TTL/3) two thirds of a second of
// slack: with a 200 ms lease, a machine loaded by the race detector and
// parallel suites can delay a renewal past the lease's end, and the other
// Locker then rightly gets in.
func TestRenewalKeepsLongWorkExclusive(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = time.Second
	holder := newLocker(t, srv, lock.Options{TTL: ttl})
	other := newLocker(t, srv, lock.Options{TTL: ttl})
	ctx := context.Background()

	// At least 5 x TTL and at least 10 attempts to break in, whichever
	// comes last: a slow machine makes fewer attempts per TTL.
	lk := mustAcquire(t, holder, "long")
	end := time.Now().Add(5 * ttl)
	attempts := 0
	for attempts < 10 || time.Now().Before(end) {
		if olk, err := other.TryAcquire(ctx, "long"); err == nil {
			_ = olk.Release(ctx)
			t.Fatalf("another Locker acquired the lock %v into a renewed hold", time.Since(end.Add(-5*ttl)))
		} else if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatal(err)
		}
		attempts++
		select {
		case <-lk.Lost():
			t.Fatalf("lease lost during renewed hold: %v", lk.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	release(t, lk)
	olk, err := other.TryAcquire(ctx, "long")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	release(t, olk)
}

// Requirement 4b: a holder whose renewal fails is told, through Lost and
// through the contexts it derived.
func TestLostLeaseIsReported(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		breakLease func(*redistest.Server)
	}{
		{"key deleted", func(s *redistest.Server) {
			s.Client().Del(context.Background(), lockKey("res"))
		}},
		{"server stopped", func(s *redistest.Server) {
			if err := s.Stop(); err != nil {
				t.Error(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			const ttl = 300 * time.Millisecond
			l := newLocker(t, srv, lock.Options{TTL: ttl})
			lk := mustAcquire(t, l, "res")
			ctx, cancel := lk.Context(context.Background())
			defer cancel()
			broke := time.Now()
			tc.breakLease(srv)
			select {
			case <-lk.Lost():
			case <-time.After(5 * ttl):
				t.Fatalf("Lost not closed %v after the lease could no longer be renewed", 5*ttl)
			}
			// Renewal runs every TTL/3; the loss is known at the latest when
			// the lease runs out.
			if took := time.Since(broke); took > ttl+200*time.Millisecond {
				t.Errorf("loss reported after %v, want within the %v lease", took, ttl)
			}
			if !errors.Is(lk.Err(), lock.ErrLeaseLost) {
				t.Errorf("Err = %v, want ErrLeaseLost", lk.Err())
			}
			if !errors.Is(context.Cause(ctx), lock.ErrLeaseLost) {
				t.Errorf("derived context cause = %v, want ErrLeaseLost", context.Cause(ctx))
			}
			if err := lk.Release(context.Background()); !errors.Is(err, lock.ErrLeaseLost) {
				t.Errorf("Release after loss = %v, want ErrLeaseLost", err)
			}
		})
	}
}

// Requirement 5: tokens strictly increase over thousands of acquisitions,
// across two Lockers, and across restarts that lose the counter.
func TestFencingTokensIncreaseAcrossRestarts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	lockers := []*lock.Locker{newLocker(t, srv, lock.Options{}), newLocker(t, srv, lock.Options{})}
	ctx := context.Background()
	var last int64
	n := 0
	for round := range 3 {
		for i := range 1000 {
			lk := mustAcquire(t, lockers[i%2], "fenced")
			if lk.Token() <= last {
				t.Fatalf("round %d, acquisition %d: token %d after %d, want strictly greater", round, i, lk.Token(), last)
			}
			last = lk.Token()
			release(t, lk)
			n++
		}
		srv.Restart()
		if got := c.Exists(ctx, lockKey("fenced")+":fence").Val(); got != 0 {
			t.Fatalf("fence counter survived the restart; the test would not test its loss")
		}
	}
	lk := mustAcquire(t, lockers[0], "fenced")
	defer release(t, lk)
	if lk.Token() <= last {
		t.Fatalf("after a restart that lost the counter: token %d, want > %d", lk.Token(), last)
	}
	t.Logf("%d acquisitions, 3 restarts, last token %d", n+1, lk.Token())
}

// Requirement 6: cancelling a waiter's context ends the wait promptly, and
// leaves no queue entry, subscription or goroutine behind.
func TestCancelledWaitLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	holderL := newLocker(t, srv, lock.Options{})
	// No timeout and no re-check for a minute: only the cancel can end
	// the wait within the test's 10 s.
	waiterL := newLocker(t, srv, lock.Options{WaitTimeout: -1, RecheckInterval: time.Minute})
	lk := mustAcquire(t, holderL, "res")
	defer release(t, lk)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := waiterL.Acquire(ctx, "res")
		done <- err
	}()
	queue := lockKey("res") + ":queue"
	channel := lockKey("res") + ":grant"
	eventually(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		subs := c.PubSubNumSub(context.Background(), channel).Val()[channel]
		return c.LLen(context.Background(), queue).Val() == 1 && subs == 1
	})

	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waiting 10s after its context was cancelled")
	}
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want one matching both ErrNotAcquired and context.Canceled", err)
	}
	eventually(t, 2*time.Second, "the queue entry to be withdrawn and the subscription to end", func() bool {
		subs := c.PubSubNumSub(context.Background(), channel).Val()[channel]
		return c.Exists(context.Background(), queue).Val() == 0 && subs == 0
	})
}

func TestWaitTimeoutMatchesDeadlineExceeded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newLocker(t, srv, lock.Options{})
	waiter := newLocker(t, srv, lock.Options{WaitTimeout: 50 * time.Millisecond})
	lk := mustAcquire(t, holder, "res")
	defer release(t, lk)
	_, err := waiter.Acquire(context.Background(), "res")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
}

func TestTryAcquireDoesNotWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newLocker(t, srv, lock.Options{})
	b := newLocker(t, srv, lock.Options{})
	lk := mustAcquire(t, a, "res")
	for _, l := range []*lock.Locker{a, b} {
		if _, err := l.TryAcquire(context.Background(), "res"); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("TryAcquire on a held lock = %v, want ErrNotAcquired", err)
		}
	}
	release(t, lk)
	lk, err := b.TryAcquire(context.Background(), "res")
	if err != nil {
		t.Fatalf("TryAcquire on a free lock: %v", err)
	}
	release(t, lk)
}

// An extend must never re-create a lock that already expired: someone else
// may hold it (redsync's SetNXOnExtend hazard).
func TestExtendNeverRecreatesExpiredLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, lock.Options{TTL: 100 * time.Millisecond, DisableRenewal: true})
	lk := mustAcquire(t, l, "res")
	if err := lk.Extend(context.Background()); err != nil {
		t.Fatalf("Extend while held: %v", err)
	}
	awaitExpired(t, c, lockKey("res"), 5*time.Second)
	if err := lk.Extend(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend after expiry = %v, want ErrNotHeld", err)
	}
	if n := c.Exists(context.Background(), lockKey("res")).Val(); n != 0 {
		t.Fatal("Extend re-created an expired lock")
	}
}

func TestDoReleasesOnErrorAndPanic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, lock.Options{})
	boom := errors.New("boom")
	err := l.Do(context.Background(), "res", func(context.Context, *lock.Lock) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if n := c.Exists(context.Background(), lockKey("res")).Val(); n != 0 {
		t.Fatal("lock still held after fn returned an error")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Do swallowed fn's panic")
			}
		}()
		_ = l.Do(context.Background(), "res", func(context.Context, *lock.Lock) error { panic("boom") })
	}()
	if n := c.Exists(context.Background(), lockKey("res")).Val(); n != 0 {
		t.Fatal("lock still held after fn panicked")
	}
}

func TestDoCancelsFnWhenLeaseIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, srv, lock.Options{TTL: 150 * time.Millisecond})
	err := l.Do(context.Background(), "res", func(ctx context.Context, lk *lock.Lock) error {
		c.Del(context.Background(), lockKey("res")) // someone breaks the lock
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), lock.ErrLeaseLost) {
			return fmt.Errorf("cause = %v, want ErrLeaseLost", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost reported even though fn returned nil", err)
	}
}

func TestDistinctNamesDoNotContend(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLocker(t, srv, lock.Options{})
	var locks []*lock.Lock
	for i := range 20 {
		lk, err := l.TryAcquire(context.Background(), "item:"+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("TryAcquire item:%d: %v", i, err)
		}
		locks = append(locks, lk)
	}
	for _, lk := range locks {
		release(t, lk)
	}
}

// countingObserver counts lost leases, as the service's metrics do. When
// watch is set, it also counts the losses it was told of after the Lost
// channel in watch had closed: a reader woken by Lost would have missed
// those in the metrics. lostAtRelease is the count of losses at the last
// release it was told of.
type countingObserver struct {
	lock.NopObserver
	lost, late    atomic.Int64
	lostAtRelease atomic.Int64
	watch         atomic.Pointer[<-chan struct{}]
}

func (o *countingObserver) Released(string, time.Duration) {
	o.lostAtRelease.Store(o.lost.Load())
}

func (o *countingObserver) LeaseLost(string) {
	if w := o.watch.Load(); w != nil {
		select {
		case <-*w:
			o.late.Add(1)
		default:
		}
	}
	o.lost.Add(1)
}

// A loss that only Release finds (renewal off, the key taken away long
// before the deadline) is still a lost lease, counted once, and counted
// before the release: metrics that show the hold over show its loss.
func TestLossFoundByReleaseIsCounted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	obs := &countingObserver{}
	l := newLocker(t, srv, lock.Options{TTL: time.Minute, DisableRenewal: true, Observer: obs})
	lk := mustAcquire(t, l, "res")
	srv.Client().Del(context.Background(), lockKey("res"))
	if err := lk.Release(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release = %v, want ErrNotHeld", err)
	}
	if n := obs.lost.Load(); n != 1 {
		t.Fatalf("lost leases counted: %d, want 1", n)
	}
	if n := obs.lostAtRelease.Load(); n != 1 {
		t.Fatalf("lost leases counted when the release was: %d, want 1 (the loss reported after the release)", n)
	}
	// A loss the watchdog reported is not counted again by Release.
	l2 := newLocker(t, srv, lock.Options{TTL: 150 * time.Millisecond, Observer: obs})
	lk2 := mustAcquire(t, l2, "res2")
	lost2 := lk2.Lost()
	obs.watch.Store(&lost2)
	srv.Client().Del(context.Background(), lockKey("res2"))
	<-lost2
	// Counted before Lost closed: read at once, the count already has it.
	if n := obs.lost.Load(); n != 2 || obs.late.Load() != 0 {
		t.Fatalf("lost leases counted when Lost closed: %d (%d of them after it closed), want 2 (0)", n, obs.late.Load())
	}
	_ = lk2.Release(context.Background())
	if n := obs.lost.Load(); n != 2 {
		t.Fatalf("lost leases counted after Release: %d, want 2", n)
	}
}

// A renewal that succeeds in Redis but whose reply comes back after the
// Lock's deadline passed (and the loss was reported) leaves the Lock lost:
// Extend returns ErrLeaseLost, and Deadline does not move.
func TestExtendLandingAfterTheLossLeavesItLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	loadScripts(t, srv.Client()) // no NOSCRIPT round trip around the slow reply
	var armed atomic.Bool
	c := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &slowReplyConn{Conn: conn, armed: &armed, delay: 400 * time.Millisecond}
	})
	l := newLockerOn(t, c, lock.Options{TTL: 300 * time.Millisecond, DisableRenewal: true})
	lk := mustAcquire(t, l, "res")
	before := lk.Deadline()
	armed.Store(true) // the extension runs at once; its reply is 400 ms late
	err := lk.Extend(ctx)
	select {
	case <-lk.Lost():
	default:
		t.Fatalf("the Lock's deadline passed while the reply was delayed, yet Lost is open (Extend = %v)", err)
	}
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("Extend whose reply came after the loss was reported = %v, want ErrLeaseLost", err)
	}
	if d := lk.Deadline(); d.After(before) {
		t.Errorf("Deadline moved %v forward after the loss was reported", d.Sub(before))
	}
	_ = lk.Release(ctx)
}

// slowReplyConn, once armed, holds back the reply to the next request
// written on it by delay.
type slowReplyConn struct {
	net.Conn
	armed *atomic.Bool
	delay time.Duration
	slow  atomic.Bool
}

func (c *slowReplyConn) Write(p []byte) (int, error) {
	if c.armed.CompareAndSwap(true, false) {
		c.slow.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *slowReplyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.slow.CompareAndSwap(true, false) {
		time.Sleep(c.delay)
	}
	return n, err
}

// Options that cannot work are refused by New with an error that names the
// option; the ones next to them are accepted.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer c.Close()
	for _, tc := range []struct {
		opts lock.Options
		bad  string // "" when the options are valid
	}{
		{lock.Options{TTL: 5 * time.Millisecond}, "TTL"},
		{lock.Options{TTL: time.Second, FenceTTL: 999 * time.Millisecond}, "FenceTTL"},
		{lock.Options{TTL: time.Second, FenceTTL: time.Second}, ""},
		{lock.Options{FenceTTL: -1}, ""},
		{lock.Options{Prefix: "a{b"}, "Prefix"},
	} {
		l, err := lock.New(c, tc.opts)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("New(%+v) = %v, want a Locker", tc.opts, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.opts, err, tc.bad)
		}
		if l != nil {
			_ = l.Close()
		}
	}
}
