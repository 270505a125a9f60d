package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// reserved is how many tokens a release's reply sets aside after the one it
// issues: the burst (4) less that one.
const reserved = 3

// localRun gives a's next Lock on name a run of reserved tokens: a first
// hold taken directly (the fast path reserves nothing), released to a
// second goroutine of a's through the release script, which keeps the lock
// for it. (The release queues the process in Redis only once a listens
// for grants.) It returns that second Lock.
func localRun(t *testing.T, a *lock.Locker, name string) *lock.Lock {
	t.Helper()
	first := mustAcquire(t, a, name)
	second := acquireAsync(t, context.Background(), a, name)
	eventually(t, 5*time.Second, "a second goroutine to wait", func() bool { return a.Waiting(name) == 1 })
	eventually(t, 5*time.Second, "a to listen for grants", func() bool { return a.Listening(name) })
	release(t, first)
	lk := <-second
	if lk == nil {
		t.FailNow()
	}
	return lk
}

// passLocally releases lk with another goroutine of its Locker waiting and
// returns the Lock that goroutine gets.
func passLocally(t *testing.T, l *lock.Locker, lk *lock.Lock) *lock.Lock {
	t.Helper()
	next := acquireAsync(t, context.Background(), l, lk.Name())
	eventually(t, 5*time.Second, "the next goroutine to wait", func() bool { return l.Waiting(lk.Name()) == 1 })
	release(t, lk)
	got := <-next
	if got == nil {
		t.FailNow()
	}
	return got
}

// A Lock with reserved tokens left passes to the next local waiter without
// taking the lock in Redis again: the key stays under the same owner, and
// the new Lock has the next token, which the counter in Redis already
// covers. The one script each hand-off runs is the new Lock's renewal,
// which checks that the key is still the run's before the old Lock's
// Release returns.
func TestLocalRunPassesTheLockWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	a := newLocker(t, srv, lock.Options{WaitTimeout: 20 * time.Second})
	lk := localRun(t, a, "res")
	fence, err := admin.Get(ctx, lockKey("res")+":fence").Int64()
	if err != nil || fence != lk.Token()+reserved {
		t.Fatalf("fence counter %d (%v) after a release kept the lock with token %d, want that token + %d", fence, err, lk.Token(), reserved)
	}
	for i := range reserved {
		before, extends := evalshaCalls(t, admin), commandCalls(t, admin, "pexpire")
		next := passLocally(t, a, lk)
		if n, x := evalshaCalls(t, admin)-before, commandCalls(t, admin, "pexpire")-extends; n != 1 || x != 1 {
			t.Errorf("hand-off %d: %d scripts ran, %d PEXPIRE, want one, the renewal that checks the key", i+1, n, x)
		}
		if next.Owner() != lk.Owner() || next.Token() != lk.Token()+1 {
			t.Errorf("hand-off %d: owner %s token %d after owner %s token %d, want the same owner and the next token", i+1, next.Owner(), next.Token(), lk.Owner(), lk.Token())
		}
		lk = next
	}
	if got := holder(admin, "res"); got != lk.Owner() {
		t.Errorf("the key's owner is %q, want the run's %q", got, lk.Owner())
	}
	// The reserved tokens are used up: the next release goes to Redis,
	// which gives the next waiter a new owner and a new token.
	before := evalshaCalls(t, admin)
	next := passLocally(t, a, lk)
	if evalshaCalls(t, admin) == before || next.Owner() == lk.Owner() || next.Token() <= fence {
		t.Errorf("after the run: owner %s token %d (counter was %d), want a new owner and a token above the counter, from a script", next.Owner(), next.Token(), fence)
	}
	release(t, next)
	if admin.Exists(ctx, lockKey("res")).Val() != 0 {
		t.Error("the lock is still held after the last release")
	}
}

// A process may die in the middle of a run, holding a reserved token that
// Redis never saw used. Whoever takes the lock next must get a larger
// token, also when the counter leads the clock (here by an hour, as after
// a failover from a master whose clock ran ahead), where the clock alone
// would not make it larger. The control records only the token issued,
// not the reserved ones, and the next holder gets a token the run used.
func TestLocalRunTokensStayBelowTheNextHolders(t *testing.T) {
	t.Parallel()
	if err := nextHolderAfterDeadRun(t); err != nil {
		t.Error(err)
	}
}

func TestLocalRunTokensControlUnreserved(t *testing.T) {
	mustCatch(t, scriptRule(lock.UnreservedRuns),
		"the next holder's token was larger without the reservation: the test would not catch a run's tokens issued again",
		nextHolderAfterDeadRun)
}

func nextHolderAfterDeadRun(t *testing.T) error {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	admin.Set(ctx, lockKey("res")+":fence", now.Add(time.Hour).UnixMicro(), 0)
	opts := lock.Options{WaitTimeout: 20 * time.Second}
	a, b := newLocker(t, srv, opts), newLocker(t, srv, opts)
	lk := passLocally(t, a, localRun(t, a, "res"))
	// a's process dies holding lk: its lease runs out, and the key goes.
	admin.Del(ctx, lockKey("res"))
	next := mustAcquire(t, b, "res")
	defer func() { _ = next.Release(ctx) }()
	defer func() { _ = lk.Release(ctx) }()
	if next.Token() <= lk.Token() {
		return fmt.Errorf("the next holder's token %d is not above %d, which the dead run's holder used", next.Token(), lk.Token())
	}
	return nil
}

// With renewal disabled, each Lock's lease is TTL from its own acquisition,
// so every hold, also within a run, comes from a script of its own.
func TestNoLocalRunWithoutRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	a := newLocker(t, srv, lock.Options{WaitTimeout: 20 * time.Second, DisableRenewal: true})
	lk := localRun(t, a, "res")
	before := evalshaCalls(t, admin)
	next := passLocally(t, a, lk)
	if evalshaCalls(t, admin) == before || next.Owner() == lk.Owner() {
		t.Errorf("with renewal disabled, the hold after owner %s went to %s without a script", lk.Owner(), next.Owner())
	}
	release(t, next)
}
