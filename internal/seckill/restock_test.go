package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/lock"
)

// The answer to a restock is the product as that restock left it, while
// purchases on two replicas run alongside: the stock it set, and the sold
// count at that moment. The restock's fencing token tells which orders came
// before it (a smaller token: written by an earlier holder) and which after,
// so the sold count of the answer must equal the orders with a smaller
// token. An answer read after the lock is released shows the purchases that
// got in between: a stock below the one set.
func TestRestockAnswersTheStateItSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stA, stB := e.store(), e.store()
	opts := lock.Options{WaitTimeout: 5 * time.Second}
	svcs := []*seckill.Service{
		seckill.NewService(e.locker(opts), stA, seckill.Options{BatchMax: 16}),
		seckill.NewService(e.locker(opts), stB, seckill.Options{BatchMax: 16}),
	}
	ctx := context.Background()
	p := e.product(stA, 5)

	// Buyers on both replicas, each a fresh user per purchase, until the
	// restocks are done; bounded in count whatever happens.
	const buyers, maxPurchases = 8, 20000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var created, unexpected atomic.Int64
	var firstErr atomic.Value
	for b := range buyers {
		wg.Go(func() {
			for i := range maxPurchases {
				select {
				case <-stop:
					return
				default:
				}
				_, err := svcs[(b+i)%2].Purchase(ctx, p.ID, fmt.Sprintf("b%d-%d", b, i))
				switch {
				case err == nil:
					created.Add(1)
				case errorsIsAny(err, seckill.ErrSoldOut, seckill.ErrBusy):
				default:
					unexpected.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}

	type answer struct {
		set   int64
		got   seckill.Product
		index int
	}
	const restocks = 60
	var answers []answer
	var restockErr error
	for i := range restocks {
		// Wait for a sale since the last restock, so that every restock
		// lands in the middle of purchases.
		// Past the deadline the restock goes ahead all the same.
		before := created.Load()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = poll.Until(wctx, time.Millisecond, func() (bool, error) { return created.Load() != before, nil })
		cancel()
		set := int64(20 + i%7)
		got, err := svcs[i%2].Restock(ctx, p.ID, set)
		if err != nil {
			restockErr = fmt.Errorf("restock %d to %d: %w", i, set, err)
			break
		}
		answers = append(answers, answer{set: set, got: *got, index: i})
	}
	close(stop)
	wg.Wait()
	if restockErr != nil {
		t.Fatal(restockErr)
	}
	if n := unexpected.Load(); n > 0 {
		t.Fatalf("%d purchases failed unexpectedly, e.g. %v", n, firstErr.Load())
	}

	orders := allOrders(t, stA, p.ID)
	if created.Load() < restocks {
		t.Fatalf("only %d purchases were made alongside %d restocks: the test did not test anything", created.Load(), restocks)
	}
	for _, a := range answers {
		if a.got.Stock != a.set {
			t.Errorf("restock %d set stock %d, but answered stock %d (sold %d): the answer is not the state it set",
				a.index, a.set, a.got.Stock, a.got.Sold)
			continue
		}
		before := int64(0)
		for _, o := range orders {
			if o.Fence < a.got.Fence {
				before++
			}
		}
		if a.got.Sold != before {
			t.Errorf("restock %d (token %d) answered sold %d, but %d orders carry an older token", a.index, a.got.Fence, a.got.Sold, before)
		}
	}
	t.Logf("%d restocks alongside %d purchases on two replicas", len(answers), created.Load())
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// allOrders reads every order of the product, by cursor.
func allOrders(t *testing.T, st seckill.Store, id int64) []*seckill.Order {
	t.Helper()
	var out []*seckill.Order
	q := seckill.OrderQuery{Limit: seckill.MaxOrderLimit, Cursor: true}
	for {
		page, err := st.Orders(context.Background(), id, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Orders...)
		if page.Next == 0 {
			return out
		}
		q.After = page.Next
	}
}
