package lock_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

func TestMain(m *testing.M) {
	// Tests stop servers on purpose; go-redis would log every failed dial.
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// newLocker returns a Locker on its own client (its own connection pool, as
// a separate process would have), closed when the test ends.
func newLocker(t *testing.T, srv *redistest.Server, opts lock.Options) *lock.Locker {
	t.Helper()
	l, err := lock.New(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockKey is the Redis key of the lock called name with the default prefix.
func lockKey(name string) string { return lock.DefaultPrefix + "{" + name + "}" }

// eventually polls cond every millisecond or so until it holds or timeout
// passes. It waits for a condition, never for time to pass.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitExpired waits until key is gone from Redis (its TTL ran out).
func awaitExpired(t *testing.T, c *redis.Client, key string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, key+" to expire", func() bool {
		n, err := c.Exists(context.Background(), key).Result()
		return err == nil && n == 0
	})
}

// wrappedClient returns a client of srv whose every connection goes
// through wrap, which delays, drops or silences traffic to force an
// interleaving. It is closed when the test ends.
func wrappedClient(t *testing.T, srv *redistest.Server, opts redis.Options, wrap func(net.Conn) net.Conn) *redis.Client {
	t.Helper()
	opts.Addr = srv.Addr()
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(conn), nil
	}
	c := redis.NewClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustAcquire(t *testing.T, l *lock.Locker, name string) *lock.Lock {
	t.Helper()
	lk, err := l.Acquire(context.Background(), name)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	return lk
}

func release(t *testing.T, lk *lock.Lock) {
	t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", lk.Name(), err)
	}
}
