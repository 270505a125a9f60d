package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/lock/antipattern"
	"github.com/seckill-ref/seckill/lock/seedlock"
)

// Each common wrong lock is broken here on purpose, with the harmful
// interleaving injected through its hook, and then this package's lock goes
// through the same scenario and holds.

// SETNX then EXPIRE: the client crashes between the two commands.
func TestAntipatternSetNXThenExpireDeadlocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const ttl = 200 * time.Millisecond

	bad := &antipattern.SetNXThenExpire{Client: c, TTL: ttl,
		BetweenSetNXAndExpire: func() error { return antipattern.ErrCrashed }}
	if _, _, err := bad.TryLock(ctx, "bad"); !errors.Is(err, antipattern.ErrCrashed) {
		t.Fatalf("TryLock = %v, want the simulated crash", err)
	}
	// The lock exists without a TTL: it will never expire, and nobody can
	// ever take it again. That is the deadlock.
	if n := c.Exists(ctx, "bad").Val(); n != 1 {
		t.Fatal("SETNX did not leave the lock behind; the scenario did not run")
	}
	if ttlLeft := c.TTL(ctx, "bad").Val(); ttlLeft >= 0 {
		t.Fatalf("TTL = %v, want none (the crash came before EXPIRE)", ttlLeft)
	}
	other := &antipattern.SetNXThenExpire{Client: c, TTL: ttl}
	if _, ok, _ := other.TryLock(ctx, "bad"); ok {
		t.Fatal("another client took the orphaned lock")
	}

	// The same crash right after acquiring: SET NX PX set the lease with the
	// lock, so the lock frees itself.
	crashed, err := lock.New(srv.Client(), lock.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.Acquire(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	_ = crashed.Close()
	if pttl := c.PTTL(ctx, lockKey("good")).Val(); pttl <= 0 {
		t.Fatalf("PTTL = %v, want the lease set atomically with the lock", pttl)
	}
	lk := mustAcquire(t, newLocker(t, srv, lock.Options{}), "good")
	release(t, lk)
}

// GETSET timestamps: value = expiry timestamp, judged by each client's
// own clock.
func TestAntipatternExpiryTimestampTrustsClientClocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const ttl = 10 * time.Second

	a := &antipattern.ExpiryTimestamp{Client: c, TTL: ttl}
	skewed := &antipattern.ExpiryTimestamp{Client: c, TTL: ttl,
		Now: func() time.Time { return time.Now().Add(ttl + time.Second) }}
	if _, ok, err := a.TryLock(ctx, "bad"); err != nil || !ok {
		t.Fatalf("A's TryLock = %v, %v", ok, err)
	}
	_, ok, err := skewed.TryLock(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("the client with a fast clock did not take A's live lock; the scenario did not run")
	}
	// Two holders. And with no owner in the value, anyone can unlock.
	if err := skewed.Unlock(ctx, "bad", ""); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "bad").Val(); n != 0 {
		t.Fatal("Unlock without an owner check should have deleted the lock")
	}

	// The lease lives in Redis (PX): no client clock is consulted.
	la := newLocker(t, srv, lock.Options{TTL: ttl})
	lb := newLocker(t, srv, lock.Options{TTL: ttl})
	lk := mustAcquire(t, la, "good")
	defer release(t, lk)
	if _, err := lb.TryAcquire(ctx, "good"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second Locker's TryAcquire = %v, want ErrNotAcquired", err)
	}
}

// Unconditional DEL: plain DEL after the lease expired deletes the
// next holder's lock.
func TestAntipatternPlainDeleteFreesSuccessorsLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()

	a := &antipattern.PlainDelete{Client: c, TTL: 100 * time.Millisecond}
	b := &antipattern.PlainDelete{Client: c, TTL: 10 * time.Second}
	ownerA, ok, err := a.TryLock(ctx, "bad")
	if err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	awaitExpired(t, c, "bad", 5*time.Second) // A's work outlives its lease
	if _, ok, _ := b.TryLock(ctx, "bad"); !ok {
		t.Fatal("B could not take the expired lock")
	}
	if err := a.Unlock(ctx, "bad", ownerA); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.TryLock(ctx, "bad"); !ok {
		t.Fatal("C could not enter; A's DEL did not free B's lock and the scenario did not run")
	}
	// B and C now both hold the lock.

	la := newLocker(t, srv, lock.Options{TTL: 100 * time.Millisecond, DisableRenewal: true})
	lb := newLocker(t, srv, lock.Options{})
	lc := newLocker(t, srv, lock.Options{})
	lkA := mustAcquire(t, la, "good")
	awaitExpired(t, c, lockKey("good"), 5*time.Second)
	lkB := mustAcquire(t, lb, "good")
	if err := lkA.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("A's late Release = %v, want ErrNotHeld", err)
	}
	if _, err := lc.TryAcquire(ctx, "good"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("C's TryAcquire = %v, want ErrNotAcquired: B still holds", err)
	}
	release(t, lkB)
}

// GET then DEL: the lease expires in between.
func TestAntipatternGetThenDeleteRace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()

	b := &antipattern.GetThenDelete{Client: c, TTL: 10 * time.Second}
	var ownerB string
	a := &antipattern.GetThenDelete{Client: c, TTL: 10 * time.Second,
		BetweenGetAndDel: func() {
			// A pause here: A's lease runs out and B takes the lock.
			c.PExpire(ctx, "bad", time.Millisecond)
			awaitExpired(t, c, "bad", 5*time.Second)
			var ok bool
			ownerB, ok, _ = b.TryLock(ctx, "bad")
			if !ok {
				t.Error("B could not take the expired lock")
			}
		}}
	ownerA, ok, err := a.TryLock(ctx, "bad")
	if err != nil || !ok {
		t.Fatalf("A: %v %v", ok, err)
	}
	if err := a.Unlock(ctx, "bad", ownerA); err != nil {
		t.Fatal(err)
	}
	if ownerB == "" {
		t.Fatal("the hook did not run; the scenario did not run")
	}
	if got := c.Get(ctx, "bad").Val(); got == ownerB {
		t.Fatal("B's lock survived; the race did not happen")
	}

	// The compare and the delete are one script: the same timeline (A's
	// lease ends, B acquires, A releases) leaves B's lock alone.
	la := newLocker(t, srv, lock.Options{TTL: 10 * time.Second})
	lb := newLocker(t, srv, lock.Options{})
	lkA := mustAcquire(t, la, "good")
	c.PExpire(ctx, lockKey("good"), time.Millisecond)
	awaitExpired(t, c, lockKey("good"), 5*time.Second)
	lkB := mustAcquire(t, lb, "good")
	if err := lkA.Release(ctx); !errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("A's late Release = %v, want ErrNotHeld", err)
	}
	if got := holder(c, "good"); got != lkB.Owner() {
		t.Fatalf("lock value = %q after A's release, want B's owner", got)
	}
	release(t, lkB)
}

// The correct but polling lock (seedlock.Mutex) is the benchmark's baseline: check
// that it does exclude and does time out.
func TestSeedLockExcludesAndTimesOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	a := &seedlock.Mutex{Client: srv.Client(), TTL: 5 * time.Second, Wait: 50 * time.Millisecond, Retry: 10 * time.Millisecond}
	b := &seedlock.Mutex{Client: srv.Client(), TTL: 5 * time.Second, Wait: 50 * time.Millisecond, Retry: 10 * time.Millisecond}
	owner, ok, err := a.Lock(ctx, "k")
	if err != nil || !ok {
		t.Fatalf("a.Lock: %v %v", ok, err)
	}
	if _, ok, err := b.Lock(ctx, "k"); err != nil || ok {
		t.Fatalf("b.Lock while held = %v, %v; want a timeout", ok, err)
	}
	if err := a.Unlock(ctx, "k", owner); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.Lock(ctx, "k"); err != nil || !ok {
		t.Fatalf("b.Lock after release = %v, %v", ok, err)
	}
}
