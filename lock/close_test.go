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

// An Acquire that completes after Close has begun returns ErrClosed and
// leaves the lock free; it never returns a Lock that nobody watches (not
// renewed, and Lost never closed when its lease runs out). Here the
// uncontended acquire's request is delayed on the network, and Close runs
// while it is in flight. The control lets Acquire ignore the Close: the
// Lock it returns is never told that its lease ran out.

func TestAcquireRacingCloseReturnsErrClosed(t *testing.T) {
	t.Parallel()
	if err := acquireRacingClose(t); err != nil {
		t.Error(err)
	}
}

func TestAcquireRacingCloseControlLockNeverLost(t *testing.T) {
	mustCatch(t, lock.IgnoreCloseInAcquire,
		"an Acquire that ignores Close passed the check: the test would not catch it", acquireRacingClose)
}

// acquireRacingClose returns what is wrong with the outcome of an Acquire
// that Close overtook, or nil.
func acquireRacingClose(t *testing.T) error {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	armed := new(atomic.Bool)
	cc := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return &delayedConn{inFlight: inFlight{Conn: conn}, armed: armed, delay: 300 * time.Millisecond}
	})
	if err := cc.Ping(ctx).Err(); err != nil { // one connection, open
		t.Fatal(err)
	}
	loadScripts(t, c) // no NOSCRIPT round trip around the delayed request
	const ttl = 300 * time.Millisecond
	l, err := lock.NewForTest(cc, lock.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *lock.Lock
		err error
	}
	done := make(chan result, 1)
	armed.Store(true)
	go func() {
		lk, err := l.Acquire(ctx, "closing")
		done <- result{lk, err}
	}()
	eventually(t, 5*time.Second, "the acquire to be sent", func() bool { return !armed.Load() })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		if !errors.Is(r.err, lock.ErrClosed) {
			return fmt.Errorf("Acquire during Close: got %v, want ErrClosed", r.err)
		}
		if owner := holder(c, "closing"); owner != "" {
			return fmt.Errorf("Acquire returned ErrClosed but left the lock held by %q", owner)
		}
		return nil
	}
	// A Lock returned after Close must at least be watched: Lost closes
	// when its lease runs out (with renewal stopped, at its deadline).
	awaitExpired(t, c, lockKey("closing"), 5*time.Second)
	if !lostBy(r.lk, r.lk.Deadline().Add(200*time.Millisecond)) {
		return fmt.Errorf("Acquire during Close returned a Lock whose lease ran out (deadline %v ago) without Lost closing (Err = %v)",
			time.Since(r.lk.Deadline()).Round(time.Millisecond), r.lk.Err())
	}
	return nil
}
