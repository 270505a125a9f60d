package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// A round of TryAcquireAll on a master whose replica must acknowledge
// every lock (Options.WaitReplicas) confirms the locks it won with one
// WAIT: a replica that lags past the timeout costs the round one timeout,
// not one per lock. Counted on the master (INFO commandstats), not timed.
func TestTryAcquireAllConfirmsARoundWithOneWait(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	mc := master.Client()
	ctx := context.Background()
	awaitReplicaSynced(t, mc)

	const timeout = 300 * time.Millisecond
	l := newLocker(t, master, lock.Options{WaitReplicas: 1, WaitReplicasTimeout: timeout})
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("round-%d", i)
	}
	release(t, mustAcquire(t, l, "warm-up")) // loads the scripts: no NOSCRIPT, no second pipeline

	// The replica acknowledges: every lock is won, and the replica has
	// each owner once TryAcquireAll returns.
	before := waitCalls(t, mc)
	locks, errs := l.TryAcquireAll(ctx, names)
	if got := waitCalls(t, mc) - before; got != 1 {
		t.Errorf("WAIT calls for a round of %d locks: got %d, want 1", len(names), got)
	}
	rc := replica.Client()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("TryAcquireAll %q with an acknowledging replica: %v", names[i], err)
		}
		if got := holder(rc, names[i]); got != locks[i].Owner() {
			t.Fatalf("replica has %q for %q, want the owner %q", got, names[i], locks[i].Owner())
		}
	}
	for i, err := range l.ReleaseAll(ctx, locks) {
		if err != nil {
			t.Fatalf("release %q: %v", names[i], err)
		}
	}

	// The replica lags past the timeout (frozen): every lock fails with
	// ErrNotReplicated, after one WAIT, and none is left on the master.
	replica.Freeze()
	before = waitCalls(t, mc)
	start := time.Now()
	_, errs = l.TryAcquireAll(ctx, names)
	took := time.Since(start)
	if got := waitCalls(t, mc) - before; got != 1 {
		t.Errorf("WAIT calls for a round of %d locks with a lagging replica: got %d, want 1", len(names), got)
	}
	for i, err := range errs {
		if !errors.Is(err, lock.ErrNotReplicated) {
			t.Fatalf("TryAcquireAll %q with a lagging replica: got %v, want ErrNotReplicated", names[i], err)
		}
	}
	if n := lockKeys(t, mc, names); n != 0 {
		t.Errorf("locks left on the master after the unacknowledged round: got %d, want 0", n)
	}
	t.Logf("a round of %d locks with a lagging replica took %v (replica timeout %v)", len(names), took.Round(time.Millisecond), timeout)
}

// A round whose Redis stopped answering gives its attempts up within the
// round's own time: the withdrawals of every lock go out together, by the
// round's deadline (plus a short floor to send them), not one after another
// with a timeout each.
func TestTryAcquireAllWithdrawsWithinTheRoundsTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A client as the service makes it: calls end at their context's
	// deadline, and go-redis sends none twice.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	l := newLockerOn(t, rc, lock.Options{})
	names := make([]string, 30)
	for i := range names {
		names[i] = fmt.Sprintf("stalled-%d", i)
	}
	release(t, mustAcquire(t, l, "warm-up")) // loads the scripts

	srv.Freeze()
	const round = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), round)
	defer cancel()
	start := time.Now()
	_, errs := l.TryAcquireAll(ctx, names)
	took := time.Since(start)
	for i, err := range errs {
		if err == nil {
			t.Fatalf("TryAcquireAll %q from a frozen Redis: got a lock, want an error", names[i])
		}
	}
	// One withdrawal per lock, each with its own ReleaseTimeout, takes
	// len(names) times 2 s; the round's own bound is its deadline plus the
	// floor. The margin only absorbs a slow machine: it is a twelfth of the
	// sequential time.
	if limit := round + 4*time.Second; took > limit {
		t.Errorf("a round of %d locks against a frozen Redis took %v, want about its deadline %v (limit %v)", len(names), took, round, limit)
	}
	t.Logf("a round of %d locks against a frozen Redis took %v (deadline %v): %v", len(names), took.Round(time.Millisecond), round, errs[0])
}

// awaitReplicaSynced waits until a write on c's connection is acknowledged
// by a replica (WAIT counts the replicas that have the connection's last
// write).
func awaitReplicaSynced(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 10*time.Second, "the replica to sync", func() bool {
		pipe := c.Pipeline()
		pipe.Set(ctx, "probe", "1", 0)
		acks := pipe.Do(ctx, "WAIT", 1, 100)
		_, err := pipe.Exec(ctx)
		return err == nil && acks.Val() == int64(1)
	})
}

// waitCalls is how many WAIT commands the server behind c has run.
func waitCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	return commandCalls(t, c, "wait")
}

// lockKeys counts the locks of names that exist in the Redis behind c.
func lockKeys(t *testing.T, c *redis.Client, names []string) int {
	t.Helper()
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = lockKey(n)
	}
	n, err := c.Exists(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
