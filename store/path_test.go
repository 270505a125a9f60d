package store_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// The fast path's read: the product, and which of the buyers asked for
// (not another buyer, nor one of another product) have an order for it.
func TestProductAndBuyers(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p, other := newProduct(t, s, 5), newProduct(t, s, 5)
		for _, o := range []*seckill.Order{order(p.ID, 0, "a"), order(p.ID, 0, "d"), order(other.ID, 0, "b")} {
			if err := s.InsertOrder(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		got, bought, err := s.ProductAndBuyers(ctx, p.ID, []string{"a", "b", "c", "a"})
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != p.ID || got.Name != "phone" || got.Stock != 5 || got.Sold != 2 || !maps.Equal(bought, map[string]bool{"a": true}) {
			t.Errorf("got %+v, buyers %v; want product %d, phone, stock 5, sold 2, buyers a", got, bought, p.ID)
		}
		if _, _, err := s.ProductAndBuyers(ctx, 42, []string{"a"}); !errors.Is(err, seckill.ErrNotFound) {
			t.Errorf("missing product: got %v, want ErrNotFound", err)
		}
	})
}

// The claim with the reads: a larger token claims and reads the product as
// the claim left it and the buyers among the users asked for; an equal or
// smaller one is refused and changes nothing.
func TestClaimAndRead(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p, other := newProduct(t, s, 5), newProduct(t, s, 5)
		for _, o := range []*seckill.Order{order(p.ID, 0, "a"), order(p.ID, 0, "c"), order(other.ID, 0, "b")} {
			if err := s.InsertOrder(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		got, bought, err := s.ClaimAndRead(ctx, p.ID, 10, []string{"a", "b", "d"})
		if err != nil {
			t.Fatal(err)
		}
		if got.Fence != 10 || got.Stock != 5 || got.Sold != 2 || !maps.Equal(bought, map[string]bool{"a": true}) {
			t.Errorf("claim 10: got %+v, buyers %v; want fence 10, stock 5, sold 2, buyers a", got, bought)
		}
		for _, token := range []int64{10, 9} {
			if _, _, err := s.ClaimAndRead(ctx, p.ID, token, []string{"a"}); !errors.Is(err, seckill.ErrFenceRejected) {
				t.Errorf("claim %d after 10: got %v, want ErrFenceRejected", token, err)
			}
		}
		if got, _ := s.Product(ctx, p.ID); got.Fence != 10 {
			t.Errorf("fence after the refused claims: got %d, want 10", got.Fence)
		}
		if _, _, err := s.ClaimAndRead(ctx, 42, 11, []string{"a"}); !errors.Is(err, seckill.ErrFenceRejected) {
			t.Errorf("claim of a missing product: got %v, want ErrFenceRejected", err)
		}
	})
}

// A batch of orders: each stored with its own fence and time, ids in the
// batch's order, sold counting all of them; an empty batch is refused.
func TestPlaceOrdersKeepsEachOrder(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 10)
		if err := s.ClaimFence(ctx, p.ID, 7); err != nil {
			t.Fatal(err)
		}
		created := time.Date(2030, 1, 2, 3, 4, 5, 6_000, time.UTC)
		users := []string{"d", "b", "c", "a"}
		var orders []*seckill.Order
		for i, u := range users {
			orders = append(orders, &seckill.Order{ProductID: p.ID, UserID: u, Fence: 7, CreatedAt: created.Add(time.Duration(i) * time.Second)})
		}
		if err := s.PlaceOrders(ctx, p.ID, 7, 6, orders); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(orders); i++ {
			if orders[i].ID <= orders[i-1].ID {
				t.Fatalf("ids %d then %d: want them increasing in the batch's order", orders[i-1].ID, orders[i].ID)
			}
		}
		list, err := s.Orders(ctx, p.ID, seckill.OrderQuery{Limit: 10, Cursor: true})
		if err != nil {
			t.Fatal(err)
		}
		var stored []string
		for i, o := range list.Orders {
			stored = append(stored, o.UserID)
			if o.ID != orders[i].ID || o.Fence != 7 || !o.CreatedAt.Equal(orders[i].CreatedAt) {
				t.Errorf("order %d: got %+v, want id %d, fence 7, created %v", i, o, orders[i].ID, orders[i].CreatedAt)
			}
		}
		if !slices.Equal(stored, users) {
			t.Errorf("orders by id: got %v, want %v", stored, users)
		}
		if got, _ := s.Product(ctx, p.ID); got.Stock != 6 || got.Sold != 4 {
			t.Errorf("got stock %d sold %d, want 6 and 4", got.Stock, got.Sold)
		}
		if err := s.PlaceOrders(ctx, p.ID, 7, 5, nil); err == nil {
			t.Error("an empty batch: got nil, want an error")
		}
		if got, _ := s.Product(ctx, p.ID); got.Stock != 6 {
			t.Errorf("stock after the empty batch: got %d, want 6", got.Stock)
		}
	})
}
