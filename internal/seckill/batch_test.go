package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// batchRun is a set of purchases made to queue behind a held lock, so that
// they are served as one batch when it is released.
type batchRun struct {
	t     *testing.T
	svc   *seckill.Service
	held  seckill.Lock
	id    int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	out   map[int]result // by position in arrival order
	count int
}

type result struct {
	user  string
	order *seckill.Order
	err   error
}

// holdLock takes product id's lock from another Locker, so that purchases
// made through svc queue up until release.
func holdLock(t *testing.T, e *env, svc *seckill.Service, id int64) *batchRun {
	t.Helper()
	held, err := e.locker(lock.Options{}).Acquire(context.Background(), seckill.LockName(id))
	if err != nil {
		t.Fatal(err)
	}
	return &batchRun{t: t, svc: svc, held: held, id: id, out: map[int]result{}}
}

// buy starts a purchase and waits until it stands in the queue (or, for
// the first, leads it and waits for the lock), so that arrival order is
// the order of the calls.
func (b *batchRun) buy(ctx context.Context, user string) {
	b.t.Helper()
	i := b.count
	b.count++
	b.wg.Go(func() {
		o, err := b.svc.Purchase(ctx, b.id, user)
		b.mu.Lock()
		b.out[i] = result{user, o, err}
		b.mu.Unlock()
	})
	poll.Eventually(b.t, 10*time.Second, fmt.Sprintf("purchase %d (%s) to queue", i, user), func() bool { return b.svc.Waiting(b.id) == b.count })
}

// release lets the queue through and returns every result.
func (b *batchRun) release() map[int]result {
	b.t.Helper()
	if err := b.held.Release(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	b.wg.Wait()
	return b.out
}

func batchService(e *env, st *store.Store, rec *counts, opts seckill.Options) *seckill.Service {
	opts.BatchMax = 16
	opts.Recorder = rec
	return seckill.NewService(e.locker(lock.Options{}), st, opts)
}

// One batch decides each purchase by the one-at-a-time rules, in arrival
// order: a repeat buyer (from another sale, or earlier in the batch) hears
// already_purchased, buyers beyond the stock hear sold_out, and the
// winners' orders share the batch's fencing token, larger than an earlier
// batch's.
func TestBatchAppliesTheRulesInOrder(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		rec := newCounts()
		svc := batchService(e, st, rec, seckill.Options{})
		ctx := context.Background()
		p := e.product(st, 4)
		earlier, err := svc.Purchase(ctx, p.ID, "first")
		if err != nil {
			t.Fatal(err)
		}

		b := holdLock(t, e, svc, p.ID)
		users := []string{"a", "other", "b", "a", "c", "d", "e", "a"}
		for _, u := range users {
			b.buy(ctx, u)
		}
		// "other" buys through another replica while the batch waits.
		if err := st.InsertOrder(ctx, &seckill.Order{ProductID: p.ID, UserID: "other", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		got := b.release()

		want := []error{nil, seckill.ErrAlreadyPurchased, nil, seckill.ErrAlreadyPurchased, nil,
			seckill.ErrSoldOut, seckill.ErrSoldOut, seckill.ErrAlreadyPurchased}
		var fences []int64
		for i, w := range want {
			r := got[i]
			if w == nil {
				if r.err != nil || r.order == nil || r.order.UserID != users[i] {
					t.Errorf("purchase %d (%s): got %+v, %v; want an order", i, users[i], r.order, r.err)
					continue
				}
				fences = append(fences, r.order.Fence)
			} else if !errors.Is(r.err, w) {
				t.Errorf("purchase %d (%s): got %v, want %v", i, users[i], r.err, w)
			}
		}
		if len(fences) != 3 || fences[0] != fences[1] || fences[1] != fences[2] || fences[0] <= earlier.Fence {
			t.Errorf("fences %v: want 3 equal tokens, above the earlier batch's %d", fences, earlier.Fence)
		}
		if want := []int{1, len(users)}; !slices.Equal(rec.batches, want) {
			t.Errorf("batch sizes %v, want %v", rec.batches, want)
		}
		// first, other, a, b, c: stock 4 + the order made outside the batch.
		if pr, _ := st.Product(ctx, p.ID); pr.Stock != 0 || pr.Sold != 5 {
			t.Errorf("got stock %d sold %d, want 0 and 5", pr.Stock, pr.Sold)
		}
	})
}

// A purchase whose buyer leaves while it waits is not sold; the rest of
// its batch is.
func TestBatchLeavesOutACancelledPurchase(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		svc := batchService(e, st, newCounts(), seckill.Options{})
		ctx := context.Background()
		p := e.product(st, 5)

		b := holdLock(t, e, svc, p.ID)
		b.buy(ctx, "a")
		gone, cancel := context.WithCancel(ctx)
		b.buy(gone, "b")
		b.buy(ctx, "c")
		cancel()
		got := b.release()

		if r := got[1]; !errors.Is(r.err, seckill.ErrBusy) || !errors.Is(r.err, context.Canceled) || r.order != nil {
			t.Errorf("cancelled purchase: got %+v, %v; want ErrBusy with context.Canceled", r.order, r.err)
		}
		for _, i := range []int{0, 2} {
			if got[i].err != nil {
				t.Errorf("purchase %d: %v", i, got[i].err)
			}
		}
		if has, _ := st.HasOrder(ctx, p.ID, "b"); has {
			t.Error("the cancelled buyer has an order")
		}
		if pr, _ := st.Product(ctx, p.ID); pr.Stock != 3 || pr.Sold != 2 {
			t.Errorf("got stock %d sold %d, want 3 and 2", pr.Stock, pr.Sold)
		}
	})
}

// A batch whose lease ran out and whose fence a newer holder claimed is
// refused as a whole: every purchase in it hears busy, and none is sold.
func TestBatchFenceRejectionFailsTheWholeBatch(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		stA, stB := e.store(), e.store()
		p := e.product(stA, 10)
		inside, bDone := make(chan struct{}), make(chan struct{})
		var once sync.Once
		stall := func(ctx context.Context, _ []int64) {
			once.Do(func() {
				close(inside)
				select {
				case <-bDone:
				case <-time.After(10 * time.Second): // B never got in: the test fails below
				}
			})
		}
		rec := newCounts()
		short := lock.Options{TTL: 200 * time.Millisecond, DisableRenewal: true, WaitTimeout: 5 * time.Second}
		svcA := seckill.NewService(e.locker(short), stA, seckill.Options{BatchMax: 16, Chaos: stall, Recorder: rec})
		svcB := seckill.NewService(e.locker(short), stB, seckill.Options{})

		ctx := context.Background()
		b := holdLock(t, e, svcA, p.ID)
		for _, u := range []string{"a1", "a2", "a3"} {
			b.buy(ctx, u)
		}
		if err := b.held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		<-inside // A's batch is decided and stalls before its write
		if _, err := svcB.Purchase(ctx, p.ID, "b"); err != nil {
			t.Fatalf("B: %v", err)
		}
		close(bDone)
		b.wg.Wait()
		for i, r := range b.out {
			if !errors.Is(r.err, seckill.ErrFenceRejected) || r.order != nil {
				t.Errorf("purchase %d: got %+v, %v; want ErrFenceRejected", i, r.order, r.err)
			}
		}
		pr, _ := stA.Product(ctx, p.ID)
		if pr.Stock != 9 || pr.Sold != 1 {
			t.Errorf("got stock %d sold %d, want 9 and 1: B's purchase only", pr.Stock, pr.Sold)
		}
		if rec.outcome(seckill.OutcomeFenceRejected) != 3 || rec.fence(seckill.FenceWrite) != 1 {
			t.Errorf("recorded %v and %v, want 3 fence_rejected outcomes and one write-stage rejection", rec.outcomes, rec.fences)
		}
	})
}

// Under a burst, every buyer gets an answer, nothing is oversold, and the
// queue turns buyers away at once when it is full.
func TestBatchBurst(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		stA, stB := e.store(), e.store()
		p := e.product(stA, 50)
		svcs := []*seckill.Service{
			seckill.NewService(e.locker(lock.Options{}), stA, seckill.Options{BatchMax: 8, QueueMax: 40}),
			seckill.NewService(e.locker(lock.Options{}), stB, seckill.Options{BatchMax: 8, QueueMax: 40}),
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		var mu sync.Mutex
		outcomes := map[seckill.Outcome]int{}
		users := map[string]int{}
		for i := range 400 {
			wg.Go(func() {
				user := fmt.Sprintf("u%d", i%350) // some buyers click twice
				o, err := svcs[i%2].Purchase(ctx, p.ID, user)
				mu.Lock()
				defer mu.Unlock()
				outcomes[seckill.OutcomeOf(err)]++
				if o != nil {
					users[o.UserID]++
				}
			})
		}
		wg.Wait()
		pr, _ := stA.Product(ctx, p.ID)
		list, err := stA.Orders(ctx, p.ID, seckill.OrderQuery{Limit: seckill.MaxOrderLimit, Cursor: true})
		if err != nil {
			t.Fatal(err)
		}
		if pr.Stock < 0 || pr.Stock+pr.Sold != 50 || int(pr.Sold) != len(list.Orders) || outcomes[seckill.OutcomeCreated] != len(list.Orders) {
			t.Fatalf("got stock %d, sold %d, %d orders, %d created: want stock+sold = 50 = orders + stock", pr.Stock, pr.Sold, len(list.Orders), outcomes[seckill.OutcomeCreated])
		}
		for u, n := range users {
			if n > 1 {
				t.Errorf("user %s got %d orders", u, n)
			}
		}
		if got := outcomes[seckill.OutcomeError] + outcomes[seckill.OutcomeFenceRejected]; got != 0 {
			t.Errorf("outcomes %v: want no errors or fence rejections", outcomes)
		}
		if outcomes[seckill.OutcomeBusy] == 0 {
			t.Errorf("outcomes %v: want some buyers turned away by the full queue", outcomes)
		}
	})
}
