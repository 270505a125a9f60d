package lock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// A grant to a waiting process that has just crashed must not block the
// lock for a whole lease. The crashed process's place in the queue outlives
// it by up to five re-check intervals, and a release in that window grants
// it the lock; the grant's claim lease (as long as that place's lease,
// 500 ms by default) bounds how long. The test uses a real process,
// killed with SIGKILL while it waits, and default options: the next waiter
// must get the lock within crashedGranteeBound of the release. The control
// grants the full lease instead (10 s by default), and the next waiter
// gets nothing within the bound.

// crashedGranteeBound is the claim lease (500 ms), the next waiter's
// re-check after it, and slack for a loaded machine.
const crashedGranteeBound = 1500 * time.Millisecond

func TestGrantToCrashedProcessBlocksOnlyItsClaim(t *testing.T) {
	t.Parallel()
	took, err := grantToCrashedProcess(t)
	if err != nil {
		t.Fatalf("the next waiter after a grant to a crashed process: %v; want the lock within %v", err, crashedGranteeBound)
	}
	t.Logf("the next waiter got the lock %v after the release that granted it to the crashed process", took.Round(time.Millisecond))
}

func TestGrantToCrashedProcessControlFullLeaseBlocks(t *testing.T) {
	breakScripts(t, lock.FullLeaseGrants)
	took, err := grantToCrashedProcess(t)
	if err == nil {
		t.Fatalf("control: with full-lease grants the next waiter still got the lock %v after the release; the test would not catch a grant that blocks for a whole lease", took)
	}
	t.Logf("control: %v", err)
}

// Environment of the waiting child process.
const (
	childAddrEnv = "LOCK_TEST_WAITER_ADDR"
	childName    = "crash"
)

// TestHelperWaitingProcess is the child process of grantToCrashedProcess,
// not a test: it waits for the lock with default options until it is
// killed.
func TestHelperWaitingProcess(t *testing.T) {
	t.Parallel()
	addr := os.Getenv(childAddrEnv)
	if addr == "" {
		t.Skip("the child process of TestGrantToCrashedProcess*")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	l, err := lock.NewForTest(c, lock.Options{WaitTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(context.Background(), childName)
	t.Fatalf("the lock came to the process that was to be killed while waiting: %v", err)
}

// grantToCrashedProcess: A holds the lock; a child process B queues for
// it, then this process's C. B is killed with SIGKILL, and A releases at
// once, while B's place is still live: the release grants the lock to B.
// It returns how long after the release C got the lock, or why it did not
// within crashedGranteeBound.
func grantToCrashedProcess(t *testing.T) (time.Duration, error) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	a := newLocker(t, srv, lock.Options{})
	cl := newLocker(t, srv, lock.Options{WaitTimeout: -1})
	lkA := mustAcquire(t, a, childName)
	queue, waiters := lockKey(childName)+":queue", lockKey(childName)+":waiters"

	child := exec.Command(os.Args[0], "-test.run", "^TestHelperWaitingProcess$", "-test.count=1")
	child.Env = append(os.Environ(), childAddrEnv+"="+srv.Addr())
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	eventually(t, 30*time.Second, "the child process to queue", func() bool { return c.LLen(ctx, queue).Val() == 1 })
	pidB := c.LIndex(ctx, queue, 0).Val()

	type result struct {
		lk  *lock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	// C's wait is cut crashedGranteeBound after the release.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		lk, err := cl.Acquire(cctx, childName)
		got <- result{lk, err, time.Now()}
	}()
	eventually(t, 5*time.Second, "this process to queue behind the child", func() bool { return c.LLen(ctx, queue).Val() == 2 })

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	entry := c.HGet(ctx, waiters, pidB).Val()
	ticketB := entry[strings.LastIndexByte(entry, ' ')+1:]
	released := time.Now()
	cut := time.AfterFunc(crashedGranteeBound, cancel)
	defer cut.Stop()
	release(t, lkA)
	if owner := holder(c, childName); owner != ticketB || ticketB == "" {
		t.Fatalf("after the release the lock is held by %q, want the killed process's ticket %q: its place had expired, and the test tested nothing", owner, ticketB)
	}
	r := <-got
	if r.err != nil {
		if !errors.Is(r.err, lock.ErrNotAcquired) {
			t.Fatal(r.err)
		}
		return 0, errors.Join(r.err, errors.New("lease left to the killed process: "+c.PTTL(ctx, lockKey(childName)).Val().String()))
	}
	release(t, r.lk)
	return r.at.Sub(released), nil
}

// A grant's claim lease is never longer than the TTL: with RecheckInterval
// 100 ms the claim would be 500 ms, and a grant to a process that crashed
// would block a lock whose TTL is 100 ms for five times its lease. The
// grantee's extension is held back, so the test sees the claim as the
// release set it. The control grants the uncapped claim.

func TestClaimLeaseIsCappedByTheTTL(t *testing.T) {
	t.Parallel()
	if pttl := claimAfterRelease(t); pttl > 100*time.Millisecond {
		t.Errorf("the grant's lease is %v, longer than the 100ms TTL", pttl)
	}
}

func TestClaimLeaseControlUncappedClaim(t *testing.T) {
	breakScripts(t, lock.UncappedClaims)
	pttl := claimAfterRelease(t)
	if pttl <= 100*time.Millisecond {
		t.Fatalf("control: with uncapped claims the grant's lease is %v, within the TTL: the test would not catch it", pttl)
	}
	t.Logf("control: the grant's lease is %v", pttl)
}

// claimAfterRelease: A holds "res", B waits with its first extension
// delayed; A releases, granting the lock to B. It returns the lock's PTTL
// right after the release.
func claimAfterRelease(t *testing.T) time.Duration {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	loadScripts(t, c)
	opts := lock.Options{TTL: 100 * time.Millisecond, RecheckInterval: 100 * time.Millisecond, WaitTimeout: 10 * time.Second}
	a := newLocker(t, srv, opts)
	var armed atomic.Bool
	bc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &scriptDelayConn{inFlight: inFlight{Conn: conn}, script: "extend", armed: &armed, delay: 300 * time.Millisecond}
	})
	b := newLockerOn(t, bc, opts)
	lkA := mustAcquire(t, a, "res")
	got := make(chan error, 1)
	measured := make(chan struct{})
	go func() {
		lk, err := b.Acquire(ctx, "res")
		if err == nil {
			<-measured // B's release would delete the key being measured
			_ = lk.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "B to queue", func() bool { return c.LLen(ctx, lockKey("res")+":queue").Val() == 1 })
	armed.Store(true)
	release(t, lkA)
	pttl := c.PTTL(ctx, lockKey("res")).Val()
	close(measured)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if pttl <= 0 {
		t.Fatalf("the lock was gone right after the release (PTTL %v): the grant's lease was not measured", pttl)
	}
	return pttl
}

// scriptDelayConn, once armed, delays the next call of the named script
// written on it.
type scriptDelayConn struct {
	inFlight
	script string
	armed  *atomic.Bool
	delay  time.Duration
}

func (c *scriptDelayConn) Write(p []byte) (int, error) {
	if s, _, _ := lock.ScriptCall(parseCommand(p)); s != c.script || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	return c.later(p, c.delay, nil)
}
