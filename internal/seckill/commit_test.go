package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// roundStore is a Store that records the products of every
// ClaimAndReadAll and PlaceOrdersAll, and holds its first
// seckill.CommitRounds calls of ClaimAndReadAll until release: every
// round a process may have at work is in flight, while others' products
// queue.
type roundStore struct {
	*store.Store
	claiming chan struct{} // one message per call held
	release  chan struct{}
	hold     int // how many of the first calls are held

	mu             sync.Mutex
	claims, places [][]int64
}

func newRoundStore(st *store.Store) *roundStore {
	return &roundStore{Store: st, claiming: make(chan struct{}, seckill.CommitRounds), release: make(chan struct{}), hold: seckill.CommitRounds}
}

func (r *roundStore) ClaimAndReadAll(ctx context.Context, claims []seckill.Claim) ([]seckill.Claimed, error) {
	var ids []int64
	for _, c := range claims {
		ids = append(ids, c.ProductID)
	}
	r.mu.Lock()
	r.claims = append(r.claims, ids)
	hold := len(r.claims) <= r.hold
	r.mu.Unlock()
	if hold {
		r.claiming <- struct{}{}
		<-r.release
	}
	return r.Store.ClaimAndReadAll(ctx, claims)
}

func (r *roundStore) PlaceOrdersAll(ctx context.Context, ps []seckill.Placement) ([]error, error) {
	var ids []int64
	for _, p := range ps {
		ids = append(ids, p.ProductID)
	}
	r.mu.Lock()
	r.places = append(r.places, ids)
	r.mu.Unlock()
	return r.Store.PlaceOrdersAll(ctx, ps)
}

func (r *roundStore) calls() (claims, places [][]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.claims), slices.Clone(r.places)
}

// rounds buys one item of each of the first seckill.CommitRounds products,
// one at a time, and holds each one's round in the store; then one item of
// each other product, which queue for the next round; then lets them all
// go. It returns each purchase's outcome, by product.
func rounds(t *testing.T, svc *seckill.Service, rs *roundStore, products []*seckill.Product) map[int64]error {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	out := map[int64]error{}
	buy := func(p *seckill.Product) {
		wg.Go(func() {
			_, err := svc.Purchase(ctx, p.ID, fmt.Sprintf("buyer-of-%d", p.ID))
			mu.Lock()
			out[p.ID] = err
			mu.Unlock()
		})
	}
	held := seckill.CommitRounds
	for _, p := range products[:held] {
		buy(p)
		<-rs.claiming
	}
	for i, p := range products[held:] {
		buy(p)
		poll.Eventually(t, 10*time.Second, fmt.Sprintf("product %d to wait for a round", p.ID), func() bool { return svc.RoundsWaiting() == i+1 })
	}
	close(rs.release)
	wg.Wait()
	return out
}

// Thirty products' purchases that come while every round is in flight
// are served by the next round, all together: their locks taken, their
// fences claimed and read in one call, their orders written in one.
func TestRoundServesEveryWaitingProductTogether(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		rs := newRoundStore(st)
		svc := seckill.NewService(e.locker(lock.Options{}), rs, seckill.Options{BatchMax: 16})
		var products []*seckill.Product
		for range seckill.CommitRounds + 30 {
			products = append(products, e.product(st, 2))
		}
		out := rounds(t, svc, rs, products)
		for _, p := range products {
			if err := out[p.ID]; err != nil {
				t.Errorf("purchase of product %d: %v", p.ID, err)
			}
			if got, _ := st.Product(context.Background(), p.ID); got.Stock != 1 || got.Sold != 1 {
				t.Errorf("product %d: stock %d, sold %d; want 1 and 1", p.ID, got.Stock, got.Sold)
			}
		}
		claims, places := rs.calls()
		n := seckill.CommitRounds
		want := slices.Repeat([]int{1}, n)
		written := lens(places)
		slices.Sort(written)
		if len(claims) != n+1 || len(claims[n]) != 30 || !slices.Equal(written, append(want, 30)) {
			t.Errorf("claim calls %d (products %v), write calls %d (products %v): want %d of each, one per product held, then one with the 30 products that waited",
				len(claims), lens(claims), len(places), lens(places), n+1)
		}
	})
}

func lens(s [][]int64) []int {
	n := make([]int, len(s))
	for i := range s {
		n[i] = len(s[i])
	}
	return n
}

// A round that stalls (here in the store) holds up its own products only:
// a purchase of another product that comes meanwhile is served by a round
// of its own, and answered while the first is still stalled.
func TestStalledRoundHoldsUpOnlyItsProducts(t *testing.T) {
	e := newEnv(t)
	st := e.store()
	rs := newRoundStore(st)
	rs.hold = 1
	a, b := e.product(st, 5), e.product(st, 5)
	svc := seckill.NewService(e.locker(lock.Options{}), rs, seckill.Options{BatchMax: 16})
	ctx := context.Background()
	aDone := make(chan error, 1)
	go func() {
		_, err := svc.Purchase(ctx, a.ID, "x")
		aDone <- err
	}()
	<-rs.claiming
	bDone := make(chan error, 1)
	go func() {
		_, err := svc.Purchase(ctx, b.ID, "y")
		bDone <- err
	}()
	select {
	case err := <-bDone:
		if err != nil {
			t.Errorf("b, while a's round stalls: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("b was not answered within 10s while a's round stalled")
	}
	select {
	case err := <-aDone:
		t.Errorf("a was answered (%v) while its round stalled", err)
	default:
	}
	close(rs.release)
	if err := <-aDone; err != nil {
		t.Errorf("a, once its round went on: %v", err)
	}
}

// In a round of two products whose first product's fence a newer holder
// claims before the round writes, that product's purchase is refused, and
// the other's goes through: the fence refuses per product.
func TestRoundRefusesOneProductsStaleWriteAlone(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		rs := newRoundStore(st)
		var fill []*seckill.Product // products whose rounds are held first
		for range seckill.CommitRounds {
			fill = append(fill, e.product(st, 5))
		}
		a, b := e.product(st, 5), e.product(st, 5)
		rec := newCounts()
		newer := func(ctx context.Context, products []int64) {
			if slices.Contains(products, a.ID) {
				// A newer holder of a's lock claims its fence: its token
				// is the server's clock in µs, larger than any before.
				if err := st.ClaimFence(ctx, a.ID, time.Now().Add(time.Hour).UnixMicro()); err != nil {
					t.Error(err)
				}
			}
		}
		svc := seckill.NewService(e.locker(lock.Options{}), rs, seckill.Options{BatchMax: 16, Chaos: newer, Recorder: rec})
		out := rounds(t, svc, rs, append(fill, a, b))
		for _, p := range append(fill, b) {
			if out[p.ID] != nil {
				t.Errorf("product %d: %v, want it sold", p.ID, out[p.ID])
			}
		}
		if !errors.Is(out[a.ID], seckill.ErrFenceRejected) {
			t.Fatalf("product a: %v, want it refused by the fence", out[a.ID])
		}
		ctx := context.Background()
		if got, _ := st.Product(ctx, a.ID); got.Stock != 5 || got.Sold != 0 {
			t.Errorf("a: stock %d, sold %d; want 5 and 0, nothing written", got.Stock, got.Sold)
		}
		if got, _ := st.Product(ctx, b.ID); got.Stock != 4 || got.Sold != 1 {
			t.Errorf("b: stock %d, sold %d; want 4 and 1", got.Stock, got.Sold)
		}
		if rec.fence(seckill.FenceWrite) != 1 || rec.outcome(seckill.OutcomeFenceRejected) != 1 {
			t.Errorf("recorded %v and %v, want one write-stage rejection", rec.fences, rec.outcomes)
		}
	})
}

// In a round of many products, another writer of the database (one
// without the lock and the fence: another design, a hand-made insert)
// inserts an order of one product's buyer after the round read: the unique
// index refuses that product's orders. That product's buyer is answered
// busy, a retryable answer, not already_purchased for an order the round
// did not make; every other product of the round is sold. The buyer's
// retry then hears the truth.
func TestRoundFailsOnlyTheProductWithADuplicate(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		rs := newRoundStore(st)
		var fill []*seckill.Product // products whose rounds are held first
		for range seckill.CommitRounds {
			fill = append(fill, e.product(st, 5))
		}
		var round []*seckill.Product // the products of the round with the duplicate
		for range 10 {
			round = append(round, e.product(st, 5))
		}
		a := round[4]
		var inserted atomic.Bool
		other := func(ctx context.Context, products []int64) {
			if slices.Contains(products, a.ID) && inserted.CompareAndSwap(false, true) {
				o := &seckill.Order{ProductID: a.ID, UserID: fmt.Sprintf("buyer-of-%d", a.ID), CreatedAt: time.Now().UTC()}
				if err := st.InsertOrder(ctx, o); err != nil {
					t.Error(err)
				}
			}
		}
		svc := seckill.NewService(e.locker(lock.Options{}), rs, seckill.Options{BatchMax: 16, Chaos: other})
		out := rounds(t, svc, rs, append(fill, round...))
		if !inserted.Load() {
			t.Fatal("fault not injected: no round placed product a's orders")
		}
		ctx := context.Background()
		for _, p := range append(fill, round...) {
			if p == a {
				continue
			}
			if out[p.ID] != nil {
				t.Errorf("product %d, beside the duplicate: %v, want it sold", p.ID, out[p.ID])
			}
			if got, _ := st.Product(ctx, p.ID); got.Stock != 4 || got.Sold != 1 {
				t.Errorf("product %d: stock %d, sold %d; want 4 and 1", p.ID, got.Stock, got.Sold)
			}
		}
		if err := out[a.ID]; !errors.Is(err, seckill.ErrBusy) || errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("product a, with the duplicate: got %v, want busy (retryable) and not already purchased", err)
		}
		if got, _ := st.Product(ctx, a.ID); got.Stock != 5 || got.Sold != 1 {
			t.Errorf("a: stock %d, sold %d; want 5 and the other writer's 1: nothing of the round's batch written", got.Stock, got.Sold)
		}
		if _, err := svc.Purchase(ctx, a.ID, fmt.Sprintf("buyer-of-%d", a.ID)); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Errorf("a's buyer, retrying: got %v, want ErrAlreadyPurchased (the other writer's order)", err)
		}
	})
}

// A product whose lock another process holds waits for it, fairly, while
// the round serves the other products at once; once released, it is sold.
func TestRoundServesOthersWhileOneLockIsHeldElsewhere(t *testing.T) {
	e := newEnv(t)
	st := e.store()
	a, b := e.product(st, 5), e.product(st, 5)
	svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{BatchMax: 16})
	ctx := context.Background()
	held, err := e.locker(lock.Options{}).Acquire(ctx, seckill.LockName(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() {
		_, err := svc.Purchase(ctx, a.ID, "x")
		aDone <- err
	}()
	if _, err := svc.Purchase(ctx, b.ID, "y"); err != nil {
		t.Fatalf("b, whose lock is free: %v", err)
	}
	select {
	case err := <-aDone:
		t.Fatalf("a was answered (%v) while another process held its lock", err)
	default:
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("a, once its lock was released: %v", err)
	}
	if got, _ := st.Product(ctx, a.ID); got.Sold != 1 {
		t.Errorf("a: sold %d, want 1", got.Sold)
	}
}
