package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
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

// With the fallback re-check pushed out to a minute, only the grants that
// releases hand over can wake waiters: if hand-off were broken, this test
// would hang until its wait timeout.
func TestHandOffNeedsNoPolling(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := lock.Options{RecheckInterval: time.Minute, WaitTimeout: 10 * time.Second}
	lockers := []*lock.Locker{newLocker(t, srv, opts), newLocker(t, srv, opts)}
	first := mustAcquire(t, lockers[0], "res")

	const perLocker = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*perLocker)
	for i := range 2 * perLocker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := lockers[i%2].Acquire(context.Background(), "res")
			if err != nil {
				errs <- err
				return
			}
			errs <- lk.Release(context.Background())
		}()
	}
	// Everyone is queued (in memory or in Redis) behind the first holder.
	c := srv.Client()
	eventually(t, 5*time.Second, "the other process to queue", func() bool {
		return c.LLen(context.Background(), lockKey("res")+":queue").Val() >= 1
	})
	start := time.Now()
	release(t, first)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("16 hand-offs took %v", took)
	}
}

// A release whose fast path finds nobody in line deletes the lock and does
// no more (GET, EXISTS, DEL): its look at the line is what makes it serve
// the line. B and C queue behind A, who took the lock directly, with
// core's acquire, which knows nothing of the line. A's release must grant
// B, and B's release, with no waiter of its own, must grant C, each in the
// same script: the next in line holds the lock the moment the Release
// returns. The control's release never looks at the line, and A's release
// leaves the lock free. Re-checks, which would also serve the line, are a
// minute apart here.
func TestReleaseServesTheQueueItFinds(t *testing.T) {
	t.Parallel()
	if err := releaseToNextInLine(t); err != nil {
		t.Error(err)
	}
}

func TestReleaseServesTheQueueControlQueueIgnored(t *testing.T) {
	mustCatch(t, scriptRule(lock.QueueIgnored),
		"the lock went to the next in line with a release that ignores the line: the test would not catch a release that skips the queue",
		releaseToNextInLine)
}

func releaseToNextInLine(t *testing.T) error {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := lock.Options{RecheckInterval: time.Minute, WaitTimeout: 20 * time.Second}
	a, b, cl := newLocker(t, srv, opts), newLocker(t, srv, opts), newLocker(t, srv, opts)
	// Acquire in the background; nil when cancelled (the control's case).
	acquire := func(l *lock.Locker) <-chan *lock.Lock {
		got := make(chan *lock.Lock, 1)
		go func() {
			lk, _ := l.Acquire(ctx, "next")
			got <- lk
		}()
		return got
	}
	lkA := mustAcquire(t, a, "next")
	gotB := acquire(b)
	awaitRedisQueue(t, c, "next", true)
	gotC := acquire(cl)
	eventually(t, 5*time.Second, "C to queue behind B", func() bool {
		return c.LLen(ctx, lockKey("next")+":queue").Val() == 2
	})
	// handOver releases lk and returns the next in line's Lock, which must
	// hold the lock as soon as the release has returned.
	handOver := func(who string, lk *lock.Lock, next <-chan *lock.Lock) (*lock.Lock, error) {
		release(t, lk)
		after := holder(c, "next")
		if after == "" {
			cancel() // the waiters would wait for their re-check
			return nil, fmt.Errorf("right after %s's release the lock was free: the next in line was not granted it", who)
		}
		lkNext := <-next
		if lkNext == nil {
			return nil, fmt.Errorf("the Acquire after %s's release failed", who)
		}
		if after != lkNext.Owner() {
			return lkNext, fmt.Errorf("right after %s's release the lock was held by %q, want the next in line's ticket %q", who, after, lkNext.Owner())
		}
		return lkNext, nil
	}
	lkB, err := handOver("A", lkA, gotB)
	if err != nil {
		if lkB != nil {
			release(t, lkB)
		}
		cancel()
		<-gotC
		return err
	}
	lkC, err := handOver("B", lkB, gotC)
	if lkC != nil {
		release(t, lkC)
	}
	return err
}

// Goroutines of one process are served in the order they arrived.
func TestLocalWaitersAreFIFO(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLocker(t, srv, lock.Options{})
	first := mustAcquire(t, l, "res")

	const n = 10
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := l.Acquire(context.Background(), "res")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = lk.Release(context.Background())
		}()
		// Arrival order is what FIFO is about: let goroutine i queue
		// before i+1 starts.
		waitQueued(t, l, "res", i+1)
	}
	release(t, first)
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("goroutine %d got the lock in turn %d", got, want)
		}
		want++
	}
}

// A grant message can be lost (the subscription connection drops). The
// fallback re-check must find the lock granted to the waiter anyway.
func TestLostGrantMessageIsRecovered(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	holder := newLocker(t, srv, lock.Options{})
	waiter := newLocker(t, srv, lock.Options{RecheckInterval: 50 * time.Millisecond, WaitTimeout: 10 * time.Second})
	lk := mustAcquire(t, holder, "res")

	done := make(chan error, 1)
	go func() {
		wlk, err := waiter.Acquire(context.Background(), "res")
		if err == nil {
			err = wlk.Release(context.Background())
		}
		done <- err
	}()
	awaitRedisQueue(t, c, "res", true)
	// Drop the subscription: the grant published by the release is lost.
	if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	release(t, lk)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter stranded after its grant message was lost")
	}
}

// An acquire whose reply never comes may still have taken the lock. It must
// not leave that lock orphaned until its TTL (bsm/redislock's behaviour).
func TestAmbiguousAcquireFailsClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	admin := srv.Client()
	// ContextTimeoutEnabled: the context's deadline, not ReadTimeout,
	// bounds the wait for a reply.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := lock.NewForTest(c, lock.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Warm the pool and the server's script cache: a cold EVALSHA would
	// fail with NOSCRIPT and never run.
	warm := mustAcquire(t, l, "warm")
	release(t, warm)
	bg := context.Background()
	before := evalshaCalls(t, admin)

	// Stall the server so that our acquire is read and run only after its
	// context has expired.
	stalled := make(chan error, 1)
	go func() { stalled <- admin.Do(bg, "DEBUG", "SLEEP", "0.3").Err() }()
	eventually(t, 5*time.Second, "the server to stall", func() bool {
		select {
		case err := <-stalled:
			t.Fatalf("DEBUG SLEEP: %v", err)
		default:
		}
		return redisBusy(srv.Addr())
	})
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	_, err = l.TryAcquire(ctx, "res")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if err := <-stalled; err != nil {
		t.Fatal(err)
	}
	// Both the late acquire and the withdraw reached the server after the
	// stall, in an order we do not control; either way no lock may remain.
	eventually(t, 5*time.Second, "the acquire and the withdraw to run", func() bool {
		return evalshaCalls(t, admin) >= before+2
	})
	if n := admin.Exists(bg, lockKey("res")).Val(); n != 0 {
		t.Fatalf("the lock taken by the timed-out acquire is still there (PTTL %v)", admin.PTTL(bg, lockKey("res")).Val())
	}
}

// evalshaCalls is how many EVALSHA commands the server has run.
func evalshaCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	return commandCalls(t, c, "evalsha")
}

// commandCalls is how many times the server has run the command called
// name (lower case), inside scripts or not.
func commandCalls(t *testing.T, c *redis.Client, name string) int {
	t.Helper()
	info := c.Info(context.Background(), "commandstats").Val()
	_, rest, ok := strings.Cut(info, "cmdstat_"+name+":calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}

// redisBusy reports whether a PING on a fresh connection goes unanswered
// for 20 ms (the server is inside DEBUG SLEEP).
func redisBusy(addr string) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	return c.Ping(context.Background()).Err() != nil
}

// The other order: the withdraw overtakes the acquire whose ticket it withdraws
// (the acquire's packets are delayed on the network). An owner-checked
// delete alone would find nothing to delete, and the late acquire would take
// the lock for its whole TTL; the ticket's tombstone makes it refuse.
func TestLateAcquireAfterWithdrawIsRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	var armed atomic.Bool
	c := wrappedClient(t, srv, redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}, func(conn net.Conn) net.Conn {
		return &delayedConn{inFlight: inFlight{Conn: conn}, armed: &armed, delay: 150 * time.Millisecond}
	})
	l := newLockerOn(t, c, lock.Options{TTL: time.Minute})
	warm := mustAcquire(t, l, "warm")
	release(t, warm)
	bg := context.Background()
	before := evalshaCalls(t, admin)

	armed.Store(true) // the next request written is delayed 150 ms
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	if _, err := l.TryAcquire(ctx, "res"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v, want ErrNotAcquired", err)
	}
	eventually(t, 5*time.Second, "the withdraw and the late acquire to run", func() bool {
		return evalshaCalls(t, admin) >= before+2
	})
	if n := admin.Exists(bg, lockKey("res")).Val(); n != 0 {
		t.Fatalf("the late acquire took the lock after its withdraw (PTTL %v)", admin.PTTL(bg, lockKey("res")).Val())
	}
}

// A process may keep the lock for a few local hand-offs in a row (they skip
// a Pub/Sub hop), but never more than the burst while another process
// waits: processes take turns.
//
// "While another process waits" means while it stands in Redis's queue: a
// process queues there a round trip after its first goroutine starts
// waiting (its driver subscribes, then registers), or with the release of
// its own holder, and until then the holder's process keeps the lock, as
// nobody else is queued. So each hold reads the queue, and a run counts
// the holds in a row of one process during which the other stood in it.
func TestLocalBurstIsBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	const perLocker, rounds, burst = 6, 12, 4
	lockers := []*lock.Locker{newLocker(t, srv, lock.Options{WaitTimeout: 20 * time.Second}), newLocker(t, srv, lock.Options{WaitTimeout: 20 * time.Second})}
	type hold struct {
		p           int
		otherQueued bool // the other process stood in Redis's queue during the hold
	}
	var mu sync.Mutex
	var holds []hold // in order
	var wg sync.WaitGroup
	for p, l := range lockers {
		other := lockers[1-p].ID()
		for range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					lk, err := l.Acquire(context.Background(), "res")
					if err != nil {
						t.Error(err)
						return
					}
					queue, err := admin.LRange(context.Background(), lockKey("res")+":queue", 0, -1).Result()
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					holds = append(holds, hold{p, slices.Contains(queue, other)})
					mu.Unlock()
					busy(200 * time.Microsecond)
					_ = lk.Release(context.Background())
				}
			}()
		}
	}
	wg.Wait()
	run, longest, switches, judged := 0, 0, 0, 0
	for i, h := range holds {
		if i > 0 && h.p != holds[i-1].p {
			switches++
		}
		switch {
		case !h.otherQueued:
			run = 0
		case i > 0 && h.p == holds[i-1].p && run > 0:
			run++
		default:
			run = 1
		}
		if h.otherQueued {
			judged++
		}
		longest = max(longest, run)
	}
	if longest > burst {
		t.Errorf("one process held the lock %d times in a row while the other stood in Redis's queue, want at most %d", longest, burst)
	}
	if judged < len(holds)/2 || switches < 2*perLocker*rounds/burst/2 {
		t.Errorf("fault not injected: the other process stood in the queue during %d of %d holds, and the lock changed process %d times", judged, len(holds), switches)
	}
	t.Logf("longest run %d, process switches %d, holds judged %d of %d", longest, switches, judged, len(holds))
}

// A process's run of holds in a row ends when the lock goes free with
// nobody queued. A later hold of the same process, taken directly, has no
// tokens reserved for a run: when it releases with more local waiters
// while another process waits, the lock goes to that process, not to a
// local waiter on the strength of the earlier run.
func TestBurstCountEndsWithItsRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	opts := lock.Options{WaitTimeout: 20 * time.Second}
	a, b := newLocker(t, srv, opts), newLocker(t, srv, opts)

	// a gets the lock by a grant from the queue: a run of one.
	held := mustAcquire(t, b, "res")
	got := acquireAsync(t, ctx, a, "res")
	eventually(t, 5*time.Second, "a to queue", func() bool { return admin.LLen(ctx, lockKey("res")+":queue").Val() == 1 })
	release(t, held)
	lk := <-got
	if lk == nil {
		t.FailNow()
	}
	release(t, lk) // nobody is queued: the lock goes free, the run ends

	// A new hold of a's, taken directly, with a local waiter and b queued.
	held = mustAcquire(t, a, "res")
	local := acquireAsync(t, ctx, a, "res")
	eventually(t, 5*time.Second, "a's second goroutine to wait", func() bool { return a.Waiting("res") == 1 })
	other := acquireAsync(t, ctx, b, "res")
	eventually(t, 5*time.Second, "b to queue", func() bool { return admin.LLen(ctx, lockKey("res")+":queue").Val() == 1 })
	release(t, held)

	select {
	case lk := <-other:
		if lk == nil {
			t.FailNow()
		}
		release(t, lk)
		if lk := <-local; lk != nil {
			release(t, lk)
		}
	case lk := <-local:
		if lk != nil {
			release(t, lk)
		}
		t.Error("the local waiter got the lock while another process waited: the earlier run was continued")
		if lk := <-other; lk != nil {
			release(t, lk)
		}
	}
}
