package lock_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// Processes are served in the order they queued, and a process is in line
// (in the queue list) exactly when it has a live entry. A waiting process
// whose refresh arrives later than its entry's lease has lost its place:
// the list may have expired, while the hash that holds the entries lives
// on (the scripts give both the same expiry, but an eviction under a
// volatile-* maxmemory policy can take one and not the other; here the
// test lengthens the hash's TTL itself). The late refresh must put it
// back in line, not refresh an entry that is in no list: such a process is
// never granted the lock, and every later arrival overtakes it, for as long
// as its own refreshes keep the entry alive. The control treats an entry
// still in the hash as a place in line, whatever its expiry, and the later
// arrival is served first.

func TestLateRefreshKeepsArrivalOrder(t *testing.T) {
	t.Parallel()
	inLine, order := lateRefresh(t)
	if !inLine || len(order) != 2 || order[0] != "C" {
		t.Errorf("after C's late refresh, C in the queue list: %v; order served: %v; want C back in line and served before D, which queued after it", inLine, order)
	}
}

func TestLateRefreshControlEntryKeepsPlaceLosesOrder(t *testing.T) {
	breakScripts(t, lock.EntryKeepsPlace)
	inLine, order := lateRefresh(t)
	if inLine && len(order) == 2 && order[0] == "C" {
		t.Errorf("control: C stayed in line and was served first (%v): the test would not catch a process left out of the list", order)
	}
	t.Logf("control: C in the queue list after its late refresh: %v; order served: %v", inLine, order)
}

// lateRefresh: B holds the lock, granted by A's release. C queues, the
// waiters hash is given 10 s more to live, and C's next refresh is delayed
// past its entry's lease: the queue list expires, the hash does not.
// When the refresh has landed, D queues; then B releases. It reports
// whether C was in the list after its late refresh, and the order in
// which C and D got the lock.
func lateRefresh(t *testing.T) (cInLine bool, order []string) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	armed := new(atomic.Bool)
	cc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &delayedConn{inFlight: inFlight{Conn: conn}, armed: armed, delay: 900 * time.Millisecond}
	})
	opts := lock.Options{WaitTimeout: 20 * time.Second}
	a, b, d := newLocker(t, srv, opts), newLocker(t, srv, opts), newLocker(t, srv, opts)
	lc := newLockerOn(t, cc, opts)
	queue, waiters := lockKey("fifo")+":queue", lockKey("fifo")+":waiters"

	lkA := mustAcquire(t, a, "fifo")
	gotB := acquireAsync(t, ctx, b, "fifo")
	eventually(t, 5*time.Second, "B to queue", func() bool { return c.LLen(ctx, queue).Val() == 1 })
	release(t, lkA)
	lkB := <-gotB
	if lkB == nil {
		t.FailNow()
	}

	var mu sync.Mutex
	acquire := func(name string, l *lock.Locker) {
		lk, err := l.Acquire(ctx, "fifo")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		_ = lk.Release(ctx)
	}
	var wg sync.WaitGroup
	wg.Go(func() { acquire("C", lc) })
	eventually(t, 5*time.Second, "C to queue", func() bool { return c.LLen(ctx, queue).Val() == 1 })
	pidC := c.LIndex(ctx, queue, 0).Val()
	c.PExpire(ctx, waiters, 10*time.Second)
	armed.Store(true) // C's next refresh arrives 900 ms late
	eventually(t, 5*time.Second, "the queue list to expire", func() bool { return c.Exists(ctx, queue).Val() == 0 })
	stale := c.HGet(ctx, waiters, pidC).Val()
	if stale == "" {
		t.Fatal("C's entry left the hash with the list: the scenario did not run")
	}
	eventually(t, 5*time.Second, "C's late refresh to land", func() bool {
		e := c.HGet(ctx, waiters, pidC).Val()
		return e != "" && e != stale
	})
	cInLine = c.LPos(ctx, queue, pidC, redis.LPosArgs{}).Err() == nil

	wg.Go(func() { acquire("D", d) })
	eventually(t, 5*time.Second, "D to queue", func() bool {
		for _, f := range c.HKeys(ctx, waiters).Val() {
			if f != pidC {
				return true
			}
		}
		return false
	})
	release(t, lkB)
	wg.Wait()
	return cInLine, order
}
