package lock_test

import (
	"context"
	"errors"
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
