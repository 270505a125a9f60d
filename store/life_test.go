package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// One transaction of payments over two products, each payment decided on
// its own: those that may are written, with their units moved from
// reserved to sold on their products; the others (no such order, another
// user's, a second payment of one order, a window that has ended, an
// order paid already) change nothing and get their rule's error.
func TestPayOrdersDecidesEachPayment(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		now := time.Now().UTC()
		p, q := newProduct(t, s, 10), newProduct(t, s, 10)
		reserve := func(productID int64, user string, window time.Duration) *seckill.Order {
			t.Helper()
			if err := s.ClaimFence(ctx, productID, now.UnixMicro()+int64(len(user))); err != nil && !errors.Is(err, seckill.ErrFenceRejected) {
				t.Fatal(err)
			}
			pr, _ := s.Product(ctx, productID)
			o := &seckill.Order{ProductID: productID, UserID: user, Fence: pr.Fence, CreatedAt: now, State: seckill.OrderPending, ExpiresAt: now.Add(window)}
			if err := s.PlaceOrders(ctx, productID, pr.Fence, pr.Stock-1, []*seckill.Order{o}); err != nil {
				t.Fatal(err)
			}
			return o
		}
		a, b := reserve(p.ID, "a", time.Minute), reserve(p.ID, "b", time.Minute)
		c := reserve(q.ID, "c", time.Minute)
		late := reserve(q.ID, "late", time.Millisecond)
		paid := reserve(q.ID, "paid", time.Minute)
		if _, errs, err := s.PayOrders(ctx, []seckill.Payment{{OrderID: paid.ID, UserID: "paid"}}, now); err != nil || errs[0] != nil {
			t.Fatalf("pay one order: %v, %v", errs, err)
		}
		pays := []seckill.Payment{
			{OrderID: a.ID, UserID: "a"},
			{OrderID: b.ID, UserID: "x"}, // another user's
			{OrderID: c.ID, UserID: "c"},
			{OrderID: a.ID, UserID: "a"},       // a second payment of a
			{OrderID: 4242, UserID: "a"},       // no such order
			{OrderID: late.ID, UserID: "late"}, // its window has ended
			{OrderID: paid.ID, UserID: "paid"}, // paid already
		}
		want := []error{nil, seckill.ErrNotYourOrder, nil, seckill.ErrOrderPaid, seckill.ErrOrderNotFound, seckill.ErrOrderExpired, seckill.ErrOrderPaid}
		orders, errs, err := s.PayOrders(ctx, pays, now.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for i := range pays {
			switch {
			case want[i] == nil && (errs[i] != nil || orders[i] == nil || orders[i].State != seckill.OrderPaid):
				t.Errorf("payment %d (order %d): got %v, %v; want it paid", i, pays[i].OrderID, orders[i], errs[i])
			case want[i] != nil && !errors.Is(errs[i], want[i]):
				t.Errorf("payment %d (order %d): got %v, want %v", i, pays[i].OrderID, errs[i], want[i])
			}
		}
		for _, tt := range []struct {
			id                    int64
			stock, reserved, sold int64
		}{{p.ID, 8, 1, 1}, {q.ID, 7, 1, 2}} {
			got, _ := s.Product(ctx, tt.id)
			if got.Stock != tt.stock || got.Reserved != tt.reserved || got.Sold != tt.sold {
				t.Errorf("product %d: stock %d, reserved %d, sold %d; want %d, %d, %d", tt.id, got.Stock, got.Reserved, got.Sold, tt.stock, tt.reserved, tt.sold)
			}
		}
		for id, state := range map[int64]seckill.OrderState{a.ID: seckill.OrderPaid, b.ID: seckill.OrderPending, c.ID: seckill.OrderPaid, late.ID: seckill.OrderPending} {
			if got, _ := s.Order(ctx, id); got.State != state {
				t.Errorf("order %d: %q, want %q", id, got.State, state)
			}
		}
	})
}
