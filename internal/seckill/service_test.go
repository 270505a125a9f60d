package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// redisLocker adapts the real lock to the domain's Locker, as internal/app
// does (that adapter is unexported there).
type redisLocker struct{ l *lock.Locker }

func (r redisLocker) Acquire(ctx context.Context, name string) (seckill.Lock, error) {
	lk, err := r.l.Acquire(ctx, name)
	if errors.Is(err, lock.ErrNotAcquired) {
		return nil, fmt.Errorf("%w: %w", seckill.ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return lk, nil
}

func (r redisLocker) TryAcquireAll(ctx context.Context, names []string) ([]seckill.Lock, []error) {
	locks, errs := r.l.TryAcquireAll(ctx, names)
	out := make([]seckill.Lock, len(locks))
	for i, lk := range locks {
		if lk != nil {
			out[i] = lk
		} else if errors.Is(errs[i], lock.ErrNotAcquired) {
			errs[i] = fmt.Errorf("%w: %w", seckill.ErrBusy, errs[i])
		}
	}
	return out, errs
}

func (r redisLocker) ReleaseAll(ctx context.Context, locks []seckill.Lock) []error {
	lks := make([]*lock.Lock, len(locks))
	for i, lk := range locks {
		lks[i] = lk.(*lock.Lock)
	}
	return r.l.ReleaseAll(ctx, lks)
}

func (r redisLocker) Ping(context.Context) error { return nil }

// counts is a Recorder that remembers what it was told.
type counts struct {
	mu       sync.Mutex
	outcomes map[seckill.Outcome]int
	fences   map[seckill.FenceStage]int
	batches  []int
	closed   map[seckill.OrderState]int
	expiring int // ExpiriesInProgress's sum: products being expired now
}

func newCounts() *counts {
	return &counts{outcomes: map[seckill.Outcome]int{}, fences: map[seckill.FenceStage]int{}}
}

func (c *counts) PurchaseDone(o seckill.Outcome, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcomes[o]++
}

func (c *counts) FenceRejected(s seckill.FenceStage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fences[s]++
}

func (c *counts) BatchDone(size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, size)
}

func (c *counts) OrdersClosed(state seckill.OrderState, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == nil {
		c.closed = map[seckill.OrderState]int{}
	}
	c.closed[state] += n
}

func (c *counts) ExpiriesInProgress(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expiring += n
}

func (c *counts) closedTo(s seckill.OrderState) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed[s]
}

func (c *counts) fence(s seckill.FenceStage) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fences[s]
}

// inProgress is the products being expired now, by the expiries' count.
func (c *counts) inProgress() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expiring
}

func (c *counts) outcome(o seckill.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outcomes[o]
}

// TestMain stops the PostgreSQL server that the tests start on first use.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// env is one Redis and one database; each replica built on it gets its own
// Redis client, Locker and database handle, as a separate process would.
type env struct {
	t     *testing.T
	redis *redistest.Server
	db    string
}

// newEnv is an env on a new SQLite file.
func newEnv(t *testing.T) *env {
	return newEnvOn(t, filepath.Join(t.TempDir(), "seckill.db"))
}

// newEnvOn is an env on the database db.
func newEnvOn(t *testing.T, db string) *env {
	return &env{t: t, redis: redistest.Start(t), db: db}
}

func (e *env) store() *store.Store {
	e.t.Helper()
	s, err := store.Open(e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (e *env) locker(opts lock.Options) seckill.Locker {
	e.t.Helper()
	l, err := lock.New(e.redis.Client(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return redisLocker{l}
}

func (e *env) product(st *store.Store, stock int64) *seckill.Product {
	e.t.Helper()
	p := &seckill.Product{Name: "phone", Stock: stock}
	if err := st.CreateProduct(context.Background(), p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func TestPurchase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.store()
	rec := newCounts()
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{
		Recorder: rec,
		Now:      func() time.Time { return now },
	})
	ctx := context.Background()
	p := e.product(st, 1)

	o, err := svc.Purchase(ctx, p.ID, "alice")
	if err != nil {
		t.Fatalf("Purchase: %v", err)
	}
	if o.ID == 0 || o.ProductID != p.ID || o.UserID != "alice" || o.Fence <= 0 || !o.CreatedAt.Equal(now) {
		t.Errorf("got order %+v, want an id, product %d, alice, a positive fence, created %v", o, p.ID, now)
	}
	got, _ := st.Product(ctx, p.ID)
	if got.Stock != 0 || got.Sold != 1 || got.Fence != o.Fence {
		t.Errorf("got product %+v, want stock 0, sold 1, fence %d", got, o.Fence)
	}
	for _, tt := range []struct {
		id   int64
		user string
		want error
	}{
		{p.ID, "alice", seckill.ErrAlreadyPurchased}, // a buyer hears so, even once sold out
		{p.ID, "bob", seckill.ErrSoldOut},
		{p.ID + 1, "bob", seckill.ErrNotFound},
		{0, "bob", seckill.ErrInvalid},
		{p.ID, "bad user", seckill.ErrInvalid},
	} {
		if _, err := svc.Purchase(ctx, tt.id, tt.user); !errors.Is(err, tt.want) {
			t.Errorf("Purchase(%d, %q): got %v, want %v", tt.id, tt.user, err, tt.want)
		}
	}
	if got := rec.outcome(seckill.OutcomeSoldOut); got != 1 {
		t.Errorf("sold_out outcomes: got %d, want 1", got)
	}
}

func TestAlreadyPurchased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.store()
	svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{})
	ctx := context.Background()
	p := e.product(st, 5)
	if _, err := svc.Purchase(ctx, p.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Purchase(ctx, p.ID, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Fatalf("second purchase: got %v, want ErrAlreadyPurchased", err)
	}
	if got, _ := st.Product(ctx, p.ID); got.Stock != 4 || got.Sold != 1 {
		t.Errorf("got stock %d sold %d, want 4 and 1", got.Stock, got.Sold)
	}
}

// A sold-out product must answer without the lock: here the lock is held
// elsewhere for the whole test, and the answer is still sold out, not busy.
func TestSoldOutSkipsLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.store()
	svc := seckill.NewService(e.locker(lock.Options{WaitTimeout: 50 * time.Millisecond}), st, seckill.Options{})
	ctx := context.Background()
	p := e.product(st, 0)
	other := e.locker(lock.Options{})
	lease, err := other.Acquire(ctx, seckill.LockName(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if _, err := svc.Purchase(ctx, p.ID, "alice"); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("got %v, want ErrSoldOut", err)
	}
	// And with stock, the held lock makes it busy.
	if _, err := svc.Restock(ctx, p.ID, 1); !errors.Is(err, seckill.ErrBusy) {
		t.Fatalf("restock under a held lock: got %v, want ErrBusy", err)
	}
}

// staleHolder runs the race the fence exists for, deterministically: buyer
// A takes the lock and, in the critical section, stalls until buyer B (on
// another replica) has finished a whole purchase. A's lease (no renewal,
// short TTL) runs out meanwhile, which is what lets B in. It returns the
// product afterwards, the counts of A's service, and A's error.
func staleHolder(t *testing.T, db string, unfenced bool) (*seckill.Product, *counts, error) {
	e := newEnvOn(t, db)
	stA, stB := e.store(), e.store()
	p := e.product(stA, 2)
	aInside, bDone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stall := func(ctx context.Context, _ []int64) {
		once.Do(func() { // only A's first pass stalls
			close(aInside)
			select {
			case <-bDone:
			case <-time.After(10 * time.Second): // B never got in: the test fails below
			}
		})
	}
	rec := newCounts()
	opts := lock.Options{TTL: 200 * time.Millisecond, DisableRenewal: true, WaitTimeout: 5 * time.Second}
	svcA := seckill.NewService(e.locker(opts), stA, seckill.Options{Unfenced: unfenced, Chaos: stall, Recorder: rec})
	svcB := seckill.NewService(e.locker(opts), stB, seckill.Options{Unfenced: unfenced})

	ctx := context.Background()
	errA := make(chan error, 1)
	go func() {
		_, err := svcA.Purchase(ctx, p.ID, "a")
		errA <- err
	}()
	// B starts once A has read the stock and stalled; it waits for the
	// lock, which Redis hands over when A's lease runs out.
	select {
	case <-aInside:
	case err := <-errA:
		t.Fatalf("A ended before stalling: %v", err)
	}
	_, errB := svcB.Purchase(ctx, p.ID, "b")
	close(bDone)
	if errB != nil {
		t.Fatalf("B: %v", errB)
	}
	err := <-errA
	got, perr := stA.Product(ctx, p.ID)
	if perr != nil {
		t.Fatal(perr)
	}
	return got, rec, err
}

func TestStaleHolderFenced(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		p, rec, errA := staleHolder(t, db, false)
		if !errors.Is(errA, seckill.ErrFenceRejected) || !errors.Is(errA, seckill.ErrBusy) {
			t.Fatalf("A: got %v, want ErrFenceRejected (matching ErrBusy)", errA)
		}
		if p.Sold != 1 || p.Stock != 1 {
			t.Errorf("got sold %d stock %d, want 1 and 1: B's purchase only", p.Sold, p.Stock)
		}
		if rec.outcome(seckill.OutcomeFenceRejected) != 1 || rec.fence(seckill.FenceWrite) != 1 {
			t.Errorf("recorded %v and %v, want one fence_rejected outcome at the write stage", rec.outcomes, rec.fences)
		}
	})
}

func TestStaleHolderUnfenced(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		p, _, errA := staleHolder(t, db, true)
		if errA != nil {
			t.Fatalf("A: got %v, want nil (nothing stops the stale write)", errA)
		}
		// Both read stock 2 and both wrote back 1: two sold, one item gone.
		if p.Sold != 2 || p.Stock != 1 {
			t.Errorf("got sold %d stock %d, want 2 and 1 (the lost update)", p.Sold, p.Stock)
		}
	})
}

// An unfenced Service takes the unfenced writes from its Store when it is
// built: a Store without them is refused there, naming its type, not at
// the first purchase. Built fenced, the same Store is accepted.
func TestUnfencedNeedsUnfencedStore(t *testing.T) {
	t.Parallel()
	type fencedOnly struct{ seckill.Store } // hides store.Store's unfenced writes
	seckill.NewService(nil, fencedOnly{}, seckill.Options{})

	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "UnfencedStore") || !strings.Contains(msg, "fencedOnly") {
			t.Errorf("got panic %q, want one naming UnfencedStore and the store's type", msg)
		}
	}()
	seckill.NewService(nil, fencedOnly{}, seckill.Options{Unfenced: true})
	t.Error("NewService accepted an unfenced Service over a Store without the unfenced writes")
}
