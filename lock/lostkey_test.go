package lock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// heldDo is one goroutine's Do call on a lock, stopped inside fn until the
// test lets it return.
type heldDo struct {
	got     chan *lock.Lock // the Lock fn was given
	proceed chan struct{}   // closed to let fn return nil
	done    chan error      // Do's result
}

func startDo(l *lock.Locker, name string) *heldDo {
	h := &heldDo{got: make(chan *lock.Lock, 1), proceed: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		h.done <- l.Do(context.Background(), name, func(ctx context.Context, lk *lock.Lock) error {
			h.got <- lk
			<-h.proceed
			return nil
		})
	}()
	return h
}

// await returns what ch delivers, or fails t after a generous bound.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// When Redis loses a lock's key while a process holds it on a run of
// reserved tokens, and another process then takes the lock, every Lock of
// the run whose hold overlapped the other process's is told: its Release
// (or Do) fails with ErrLeaseLost and its Lost is closed, however short
// the hold, including the Locks the run passed on without Redis after the
// loss. The key is lost three ways: deleted alone (as an eviction would),
// every key flushed, and a restart without persistence.
func TestLocalRunReportsAKeyRedisLost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		lose func(t *testing.T, srv *redistest.Server, admin *redis.Client)
	}{
		{"evicted", func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
			if n := admin.Del(context.Background(), lockKey("res")).Val(); n != 1 {
				t.Fatalf("DEL removed %d keys, want the lock's key", n)
			}
		}},
		{"flushall", func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
			if err := admin.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"restart", func(t *testing.T, srv *redistest.Server, _ *redis.Client) { srv.Restart() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client()
			ctx := context.Background()
			opts := lock.Options{WaitTimeout: 30 * time.Second}
			a, b := newLocker(t, srv, opts), newLocker(t, srv, opts)

			lk := localRun(t, a, "res") // has reserved tokens left
			first := startDo(a, "res")
			waitQueued(t, a, "res", 1)
			second := startDo(a, "res")
			waitQueued(t, a, "res", 2)

			c.lose(t, srv, admin)
			if n := admin.Exists(ctx, lockKey("res")).Val(); n != 0 {
				t.Fatal("fault not injected: the lock's key is still in Redis")
			}
			lkB := mustAcquire(t, b, "res")

			// a's holder overlapped b's hold.
			if err := lk.Release(ctx); !errors.Is(err, lock.ErrLeaseLost) {
				t.Errorf("Release of the holder when another process took the lock: %v, want ErrLeaseLost", err)
			}
			select {
			case <-lk.Lost():
			default:
				t.Error("the holder's Lost is open after its Release reported the loss")
			}

			// The next goroutine of a got the lock while b holds it (its
			// token is from a's run): however short its hold, its Do must
			// fail, and its Lost be closed, by the time Do returns.
			lk2 := await(t, first.got, "a's next goroutine to enter Do")
			if lk2.Token() > lkB.Token() {
				t.Fatalf("a's next goroutine got token %d while b holds %d: it should not have been granted", lk2.Token(), lkB.Token())
			}
			close(first.proceed)
			if err := await(t, first.done, "a's first Do to return"); !errors.Is(err, lock.ErrLeaseLost) {
				t.Errorf("Do whose hold overlapped b's: %v, want ErrLeaseLost", err)
			}
			select {
			case <-lk2.Lost():
			default:
				t.Error("Do returned, and the Lost of its Lock, passed on after the loss, is still open")
			}

			// b's hold was its own; then a's last goroutine takes the lock
			// from Redis, after b, and its hold is sound.
			release(t, lkB)
			lk3 := await(t, second.got, "a's last goroutine to enter Do")
			if lk3.Token() <= lkB.Token() || lk3.Owner() == lk.Owner() {
				t.Errorf("a's last goroutine: owner %s token %d after b's token %d, want a new acquisition with a larger token", lk3.Owner(), lk3.Token(), lkB.Token())
			}
			close(second.proceed)
			if err := await(t, second.done, "a's last Do to return"); err != nil {
				t.Errorf("Do after b released: %v, want nil", err)
			}
		})
	}
}

// heldChecks holds back the extend scripts a client writes (renewals, and
// the checks of holds passed on in memory) once armed, each until the test
// lets it through, as a slow network would; and drops the reply of the next
// release script once dropRelease is set, as a connection reset right
// after the server answered would.
type heldChecks struct {
	armed, dropRelease atomic.Bool
	landed             atomic.Int32

	mu    sync.Mutex
	gates []chan struct{} // one per held extend, in the order written
}

// sent is how many extends have been held back so far.
func (h *heldChecks) sent() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.gates)
}

// let lets the i-th held extend (from 0) reach the server.
func (h *heldChecks) let(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.gates[i]:
	default:
		close(h.gates[i])
	}
}

// client returns a Locker on a client of srv whose connections go through
// h, closed when the test ends (after every held extend was let through).
func (h *heldChecks) locker(t *testing.T, srv *redistest.Server) *lock.Locker {
	t.Helper()
	c := wrappedClient(t, srv, redis.Options{ReadTimeout: time.Minute}, func(conn net.Conn) net.Conn {
		return &checkConn{inFlight: inFlight{Conn: conn}, h: h}
	})
	// A lease of a minute: no deadline passes while a test waits for a
	// check, so only a check can answer it.
	l := newLockerOn(t, c, lock.Options{TTL: time.Minute, WaitTimeout: 30 * time.Second})
	t.Cleanup(func() {
		for i := range h.sent() {
			h.let(i)
		}
	})
	return l
}

type checkConn struct {
	inFlight
	h    *heldChecks
	drop atomic.Bool
}

func (c *checkConn) Write(p []byte) (int, error) {
	script, _, _ := lock.ScriptCall(parseCommand(p))
	switch {
	case script == "extend" && c.h.armed.Load():
		gate := make(chan struct{})
		c.h.mu.Lock()
		c.h.gates = append(c.h.gates, gate)
		c.h.mu.Unlock()
		return c.held(p, gate, func() { c.h.landed.Add(1) })
	case script == "release" && c.h.dropRelease.CompareAndSwap(true, false):
		c.drop.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *checkConn) Read(p []byte) (int, error) {
	if c.drop.Load() {
		return readThenBreak(c.Conn, p)
	}
	return c.Conn.Read(p)
}

// A check by a Lock that has already passed the lock on (so that its own
// loss reports nothing) finds the key someone else's: the Lock that holds
// the lock now is told at once, before any Release waiting for a check is
// answered, not when its own check comes back. Here the third Lock's own
// check is still held back when the second's lands.
func TestLossFoundByAnEarlierHoldReachesTheHolderAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	loadScripts(t, admin)
	ctx := context.Background()
	h := &heldChecks{}
	a := h.locker(t, srv)
	b := newLocker(t, srv, lock.Options{})

	lk1 := localRun(t, a, "res")
	n2 := acquireAsync(t, ctx, a, "res")
	waitQueued(t, a, "res", 1)
	n3 := acquireAsync(t, ctx, a, "res")
	waitQueued(t, a, "res", 2)
	h.armed.Store(true)
	r1 := make(chan error, 1)
	go func() { r1 <- lk1.Release(ctx) }()
	lk2 := await(t, n2, "the second Lock")
	eventually(t, 5*time.Second, "the second Lock's check to be sent", func() bool { return h.sent() == 1 })
	r2 := make(chan error, 1)
	go func() { r2 <- lk2.Release(ctx) }()
	lk3 := await(t, n3, "the third Lock")
	eventually(t, 5*time.Second, "the third Lock's check to be sent", func() bool { return h.sent() == 2 })

	if admin.Del(ctx, lockKey("res")).Val() != 1 {
		t.Fatal("fault not injected: the lock's key was not there to delete")
	}
	lkB := mustAcquire(t, b, "res")
	h.let(0) // the second Lock's check finds b's key

	if err := await(t, r1, "the first Release"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("first Release: %v, want ErrLeaseLost", err)
	}
	select {
	case <-lk3.Lost():
	default:
		t.Error("a Release was answered with the loss, and the Lost of the Lock holding the lock is still open")
	}
	if err := await(t, r2, "the second Release"); !errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("second Release: %v, want ErrLeaseLost", err)
	}
	if n := h.landed.Load(); n != 1 {
		t.Fatalf("fault not injected: %d checks reached Redis, want only the second Lock's", n)
	}
	h.let(1)
	if err := lk3.Release(ctx); !errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("third Release: %v, want ErrLeaseLost", err)
	}
	release(t, lkB)
}

// The run's last Release, in Redis, loses its first call's reply, and its
// second call finds the key gone: the first call released it (the Lock's
// deadline had not passed). The Release before it, which passed the lock
// on in memory and waits for a check, is answered by that same release:
// both report success, as nobody else held the lock. The renewal that
// checks the second Lock, held back until then, finds the key gone too,
// but only because the run's own release deleted it: it proves nothing.
func TestRunsOwnReleaseIsNoLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	loadScripts(t, admin)
	ctx := context.Background()
	h := &heldChecks{}
	a := h.locker(t, srv)

	lk1 := localRun(t, a, "res")
	next := acquireAsync(t, ctx, a, "res")
	waitQueued(t, a, "res", 1)
	h.armed.Store(true)
	r1 := make(chan error, 1)
	go func() { r1 <- lk1.Release(ctx) }()
	lk2 := await(t, next, "the second Lock")
	eventually(t, 5*time.Second, "the second Lock's check to be sent", func() bool { return h.sent() == 1 })

	h.dropRelease.Store(true)
	if err := lk2.Release(ctx); err != nil {
		t.Errorf("the last Release, whose first reply was lost: %v, want nil", err)
	}
	if h.dropRelease.Load() || admin.Exists(ctx, lockKey("res")).Val() != 0 {
		t.Fatal("fault not injected: the release's reply was not dropped, or the key is still there")
	}
	if err := await(t, r1, "the first Release"); err != nil {
		t.Errorf("the Release that passed the lock on: %v, want nil: nobody else held the lock", err)
	}
	h.let(0)
	eventually(t, 5*time.Second, "the held check to land", func() bool { return h.landed.Load() == 1 })
	release(t, mustAcquire(t, a, "res")) // the lock is free, and a is not stuck
}
