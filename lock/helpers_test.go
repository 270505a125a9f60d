package lock_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

func TestMain(m *testing.M) {
	// Tests stop servers on purpose; go-redis would log every failed dial.
	redis.SetLogger(quietLogger{})
	// The examples need a server, as a reader's program would.
	srv, err := redisproc.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := m.Run()
	if err := srv.Close(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// redisAddr is the address of the redis-server the examples use.
var redisAddr string

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// newLocker returns a Locker on its own client (its own connection pool, as
// a separate process would have), closed when the test ends.
func newLocker(t *testing.T, srv *redistest.Server, opts lock.Options) *lock.Locker {
	t.Helper()
	return newLockerOn(t, srv.Client(), opts)
}

// lockKey is the Redis key of the lock called name with the default prefix.
func lockKey(name string) string { return lock.DefaultPrefix + "{" + name + "}" }

// holder is the owner or ticket that holds the lock called name in the
// Redis behind c ("" when nobody does): the lock's value.
func holder(c redis.UniversalClient, name string) string {
	return c.Get(context.Background(), lockKey(name)).Val()
}

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

// lostBy reports whether lk's Lost closed by the time at. A Lost already
// closed counts whatever the time now, so that a test which reaches this
// late on a loaded machine does not race the closed channel against a
// timer that is already due.
func lostBy(lk *lock.Lock, at time.Time) bool {
	select {
	case <-lk.Lost():
		return true
	default:
	}
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-lk.Lost():
		return true
	case <-t.C:
		return false
	}
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

// newLockerOn returns a Locker on client, closed when the test ends (before
// client, if the test's cleanup closes that).
func newLockerOn(t *testing.T, client redis.UniversalClient, opts lock.Options) *lock.Locker {
	t.Helper()
	l, err := lock.NewForTest(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// inFlight is a connection whose writes a test can hold back, as a slow
// network would, without blocking the writer: later lets a copy of the
// write land after a delay, in the background. Close closes the connection
// only once every held-back write has landed: the client has given up on
// the connection, the network has not.
type inFlight struct {
	net.Conn
	wg sync.WaitGroup
}

// later reports p written, and writes a copy of it after delay; landing,
// if not nil, runs just before the copy is written.
func (c *inFlight) later(p []byte, delay time.Duration, landing func()) (int, error) {
	buf := append([]byte(nil), p...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		time.Sleep(delay) // the packet is in flight
		if landing != nil {
			landing()
		}
		// The client's write deadline has passed by now; a packet already
		// on the wire does not care.
		_ = c.Conn.SetWriteDeadline(time.Time{})
		_, _ = c.Conn.Write(buf)
	}()
	return len(p), nil
}

// held reports p written, and writes a copy of it once gate is closed, in
// the background; landing, if not nil, runs just before the copy is
// written.
func (c *inFlight) held(p []byte, gate <-chan struct{}, landing func()) (int, error) {
	buf := append([]byte(nil), p...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		<-gate // the packet is in flight
		if landing != nil {
			landing()
		}
		_ = c.Conn.SetWriteDeadline(time.Time{})
		_, _ = c.Conn.Write(buf)
	}()
	return len(p), nil
}

func (c *inFlight) Close() error {
	go func() {
		c.wg.Wait()
		_ = c.Conn.Close()
	}()
	return nil
}

// readThenBreak waits for the server's reply on c, then breaks the
// connection and reports io.EOF, as a connection reset right after the
// server answered would: the request ran, the client sees an error.
func readThenBreak(c net.Conn, p []byte) (int, error) {
	_ = c.SetReadDeadline(time.Time{})
	_, err := c.Read(p) // the reply arrives: the request ran
	_ = c.Close()
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

// acquireAsync acquires name in a new goroutine and delivers the Lock, or
// nil after reporting the error with t.Error. The goroutine ends when
// Acquire returns (at the latest when the Locker is closed).
func acquireAsync(t *testing.T, ctx context.Context, l *lock.Locker, name string) <-chan *lock.Lock {
	got := make(chan *lock.Lock, 1)
	go func() {
		lk, err := l.Acquire(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	return got
}

// awaitRedisQueue waits until one process stands in the Redis queue of
// the lock called name, and, with subscribed, until one connection listens on its
// grant channel: a waiting process's driver has registered and subscribed.
func awaitRedisQueue(t *testing.T, c *redis.Client, name string, subscribed bool) {
	t.Helper()
	ctx := context.Background()
	channel := lockKey(name) + ":grant"
	eventually(t, 5*time.Second, "a process to queue for "+name, func() bool {
		return c.LLen(ctx, lockKey(name)+":queue").Val() == 1 &&
			(!subscribed || c.PubSubNumSub(ctx, channel).Val()[channel] == 1)
	})
}

// awaitSubscribed waits until one connection listens on the grant channel
// of the lock called name.
func awaitSubscribed(t *testing.T, c *redis.Client, name string) {
	t.Helper()
	ctx := context.Background()
	channel := lockKey(name) + ":grant"
	eventually(t, 5*time.Second, "a driver to subscribe for "+name, func() bool {
		return c.PubSubNumSub(ctx, channel).Val()[channel] == 1
	})
}

// waitQueued waits until n goroutines of l wait for name.
func waitQueued(t *testing.T, l *lock.Locker, name string, n int) {
	t.Helper()
	eventually(t, 5*time.Second, "goroutines to queue", func() bool { return l.Waiting(name) == n })
}

// delayedConn delays the first write after armed is set, as a slow network
// would, without blocking the writer.
type delayedConn struct {
	inFlight
	armed *atomic.Bool
	delay time.Duration
}

func (c *delayedConn) Write(p []byte) (int, error) {
	if !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	return c.later(p, c.delay, nil)
}

// loadScripts puts the lock's scripts in the server's script cache, so that
// an EVALSHA is not answered NOSCRIPT and retried as EVAL (which would
// bypass the delayed write).
func loadScripts(t *testing.T, c *redis.Client) {
	t.Helper()
	for _, src := range lock.ScriptSources() {
		if err := c.ScriptLoad(context.Background(), src).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// parseCommand reads the command written in p (a RESP array of bulk
// strings, as go-redis writes one), or nil.
func parseCommand(p []byte) []string {
	lines := strings.Split(string(p), "\r\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "*") {
		return nil
	}
	var args []string
	for i := 2; i < len(lines); i += 2 {
		args = append(args, lines[i])
	}
	return args
}

// busy spins for d: a critical section that holds a CPU, unlike Sleep.
func busy(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// Reasons for skipping a test under go test -short, the quick loop; the
// full run (./scripts/test.sh) runs every test.
const (
	shortControl    = "-short: a control, which shows that its test's check can fail"
	shortMultiNodes = "-short: starts several redis-servers"
)

// skipInShort skips t under -short, for the reason given.
func skipInShort(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
}

// breakWith makes t a control: it skips under -short, and breaks the lock
// with breakIt (a switch from export_test.go) until the test's Lockers are
// closed.
func breakWith(t *testing.T, breakIt func() (restore func())) {
	t.Helper()
	skipInShort(t, shortControl)
	t.Cleanup(breakIt())
}

// scriptRule is a breakIt for breakWith that swaps one rule of the Lua
// scripts for rule, a broken one from export_test.go.
func scriptRule(rule lock.ScriptRule) func() (restore func()) {
	return func() func() { return lock.UseScriptRule(rule) }
}

// breakScripts is breakWith(t, scriptRule(rule)).
func breakScripts(t *testing.T, rule lock.ScriptRule) {
	t.Helper()
	breakWith(t, scriptRule(rule))
}

// mustCatch runs scenario with the lock broken by breakIt and fails t with
// failure if the scenario's check passes: then the test of the correct lock
// would not catch the defect either.
func mustCatch(t *testing.T, breakIt func() (restore func()), failure string, scenario func(*testing.T) error) {
	t.Helper()
	breakWith(t, breakIt)
	if err := scenario(t); err == nil {
		t.Fatal("control: " + failure)
	} else {
		t.Logf("control: %v", err)
	}
}
