package store_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// snapshotFlips is how many times the writer of
// TestProductAndBuyersIsOneSnapshot moves the order.
const snapshotFlips = 100

// The fast path's reads see the product and its buyers at one moment. A
// writer moves one buyer's order between pending (stock 0) and cancelled
// (stock 1), each move one transaction, as a cancel and a purchase do,
// while readers read the product and the buyer: every read must find
// either the order live and the stock 0, or neither. A product read
// before a move and its buyers after it find the stock 0 and no order: a
// sold-out answer to a buyer who at no moment both held nothing and found
// nothing left. The writer moves the order again only once every reader
// has read since its last move, so the reads overlap the moves, and both
// states must have been seen.
func TestProductAndBuyersIsOneSnapshot(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p, other := newProduct(t, s, 1), newProduct(t, s, 1)
		o := order(p.ID, 0, "u")
		if err := s.InsertOrder(ctx, o); err != nil {
			t.Fatal(err)
		}
		raw := rawDB(t, db)
		move := func(state string, delta int) error {
			tx, err := raw.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			for _, q := range []string{
				fmt.Sprintf("UPDATE orders SET state = '%s' WHERE id = %d", state, o.ID),
				fmt.Sprintf("UPDATE products SET stock = stock + %d WHERE id = %d", delta, p.ID),
			} {
				if _, err := tx.Exec(q); err != nil {
					return err
				}
			}
			return tx.Commit()
		}
		if err := move(string(seckill.OrderPending), -1); err != nil {
			t.Fatal(err)
		}

		readers := []struct {
			name string
			read func() (*seckill.Product, bool, error)
		}{
			{"ProductAndBuyers", func() (*seckill.Product, bool, error) {
				got, bought, err := s.ProductAndBuyers(ctx, p.ID, []string{"u", "v"})
				return got, bought["u"], err
			}},
			{"ProductsAndBuyers", func() (*seckill.Product, bool, error) {
				got, bought, err := s.ProductsAndBuyers(ctx, []seckill.BuyersOf{{ProductID: other.ID, UserIDs: []string{"u"}}, {ProductID: p.ID, UserIDs: []string{"u"}}})
				return got[p.ID], bought[p.ID]["u"], err
			}},
		}
		reads := make([]atomic.Int64, len(readers))
		var done atomic.Bool
		var wg sync.WaitGroup
		var mu sync.Mutex
		var torn []string
		seen := map[bool]int{} // order live -> reads that found it so
		for i, r := range readers {
			wg.Go(func() {
				for !done.Load() {
					got, live, err := r.read()
					if err != nil {
						t.Errorf("%s: %v", r.name, err)
						return
					}
					mu.Lock()
					seen[live]++
					if live != (got.Stock == 0) {
						torn = append(torn, fmt.Sprintf("%s: stock %d, order live %t", r.name, got.Stock, live))
					}
					mu.Unlock()
					reads[i].Add(1)
				}
			})
		}
		for n := range snapshotFlips {
			state, delta := seckill.OrderCancelled, 1
			if n%2 == 1 {
				state, delta = seckill.OrderPending, -1
			}
			if err := move(string(state), delta); err != nil {
				t.Error(err)
				break
			}
			for i := range reads {
				for since := reads[i].Load(); reads[i].Load() < since+2 && !t.Failed(); {
					// Two reads: the second began after the move.
					runtime.Gosched()
				}
			}
		}
		done.Store(true)
		wg.Wait()
		if len(torn) > 0 {
			t.Errorf("%d reads of %d found a stock and buyers of different moments, first: %s", len(torn), seen[true]+seen[false], torn[0])
		}
		if seen[true] < snapshotFlips/2 || seen[false] < snapshotFlips/2 {
			t.Errorf("reads found the order live %d times and not %d times; want each at least %d: the reads did not overlap the moves", seen[true], seen[false], snapshotFlips/2)
		}
	})
}
