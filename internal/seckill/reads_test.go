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
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// heldReads is a Store whose first ProductsAndBuyers, once it has read,
// waits for release before it answers: a shared read in flight, its
// snapshot taken. It records the users of every ProductsAndBuyers.
type heldReads struct {
	*store.Store
	read, release chan struct{}

	mu    sync.Mutex
	calls [][]string
}

func newHeldReads(st *store.Store) *heldReads {
	return &heldReads{Store: st, read: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldReads) ProductsAndBuyers(ctx context.Context, want []seckill.BuyersOf) (map[int64]*seckill.Product, map[int64]map[string]bool, error) {
	p, bought, err := h.Store.ProductsAndBuyers(ctx, want)
	var users []string
	for _, w := range want {
		users = append(users, w.UserIDs...)
	}
	h.mu.Lock()
	h.calls = append(h.calls, users)
	first := len(h.calls) == 1
	h.mu.Unlock()
	if first {
		close(h.read)
		<-h.release
	}
	return p, bought, err
}

func (h *heldReads) reads() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// A buyer who arrives while a shared read is in flight waits for the next
// read instead of taking that one's answer: its snapshot is older than the
// buyer. Here the read in flight saw the product sold out, a restock
// finished after it, and then buyer b arrived: b must see the restock and
// buy. Given the read in flight, b would hear sold_out after a restock
// that finished before it asked, which no order of the history explains.
func TestSharedReadStartsAfterTheBuyer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.store()
	held := newHeldReads(st)
	svc := seckill.NewService(e.locker(lock.Options{}), held, seckill.Options{BatchMax: 16})
	ctx := context.Background()
	p := e.product(st, 0)

	type answer struct {
		order *seckill.Order
		err   error
	}
	a, b := make(chan answer, 1), make(chan answer, 1)
	go func() {
		o, err := svc.Purchase(ctx, p.ID, "a")
		a <- answer{o, err}
	}()
	<-held.read // a's read has seen stock 0
	if err := st.SetStock(ctx, p.ID, 5); err != nil {
		t.Fatal(err)
	}
	go func() {
		o, err := svc.Purchase(ctx, p.ID, "b")
		b <- answer{o, err}
	}()
	poll.Eventually(t, 10*time.Second, "b to wait for a read", func() bool { return svc.ReadsWaiting(p.ID) == 1 })
	close(held.release)

	if got := <-a; !errors.Is(got.err, seckill.ErrSoldOut) {
		t.Errorf("a, whose read came before the restock: got %v, %v; want ErrSoldOut", got.order, got.err)
	}
	if got := <-b; got.err != nil || got.order == nil {
		t.Errorf("b, who came after the restock: got %v, %v; want an order", got.order, got.err)
	}
	if reads := held.reads(); len(reads) != 2 || !slices.Equal(reads[0], []string{"a"}) || !slices.Equal(reads[1], []string{"b"}) {
		t.Errorf("shared reads: got %v, want [a] and then [b]", reads)
	}
}

// Buyers who arrive while a read is in flight share the next one: one
// read answers all of them, each by its own order (here, one who bought
// earlier hears already_purchased, the others sold_out), and one who
// leaves before it is not read for.
func TestSharedReadServesTheWaitingBuyersTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.store()
	held := newHeldReads(st)
	svc := seckill.NewService(e.locker(lock.Options{}), held, seckill.Options{BatchMax: 16})
	ctx := context.Background()
	p := e.product(st, 0)
	if err := st.InsertOrder(ctx, &seckill.Order{ProductID: p.ID, UserID: "u3", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(map[string]error)
	var mu sync.Mutex
	buy := func(ctx context.Context, user string) {
		wg.Go(func() {
			_, err := svc.Purchase(ctx, p.ID, user)
			mu.Lock()
			errs[user] = err
			mu.Unlock()
		})
	}
	buy(ctx, "first")
	<-held.read
	gone, cancel := context.WithCancel(ctx)
	var users []string
	for i := range 6 {
		user := fmt.Sprintf("u%d", i)
		if i == 4 {
			buy(gone, user)
		} else {
			buy(ctx, user)
			users = append(users, user)
		}
		poll.Eventually(t, 10*time.Second, user+" to wait for a read", func() bool { return svc.ReadsWaiting(p.ID) == i+1 })
	}
	cancel()
	poll.Eventually(t, 10*time.Second, "u4 to leave", func() bool { return svc.ReadsWaiting(p.ID) == 5 })
	close(held.release)
	wg.Wait()

	for user, err := range errs {
		var want error
		switch user {
		case "u3":
			want = seckill.ErrAlreadyPurchased
		case "u4":
			if !errors.Is(err, seckill.ErrBusy) || !errors.Is(err, context.Canceled) {
				t.Errorf("u4, who left: got %v, want ErrBusy with context.Canceled", err)
			}
			continue
		default:
			want = seckill.ErrSoldOut
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", user, err, want)
		}
	}
	if reads := held.reads(); len(reads) != 2 || !slices.Equal(reads[1], users) {
		t.Errorf("shared reads: got %v, want [first] and then %v in one", reads, users)
	}
}
