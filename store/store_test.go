package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// Replicas starting together on a new database must not trip over each
// other's migration: on SQLite the immediate transaction, on PostgreSQL the
// advisory lock, makes them take turns.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		var wg sync.WaitGroup
		stores := make([]*store.Store, 8)
		errs := make([]error, len(stores))
		for i := range stores {
			wg.Go(func() { stores[i], errs[i] = store.Open(db) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Open #%d: %v", i, err)
			}
			t.Cleanup(func() { _ = stores[i].Close() })
		}
		ctx := context.Background()
		p := newProduct(t, stores[0], 3)
		got, err := stores[7].Product(ctx, p.ID)
		if err != nil {
			t.Fatalf("Product through another handle: %v", err)
		}
		if got.Stock != 3 || got.Name != "phone" || got.Sold != 0 || got.Fence != 0 {
			t.Errorf("got %+v, want stock 3, name phone, sold 0, fence 0", got)
		}
	})
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, db := range []string{"", filepath.Join(dir, "a?b.db"), "mysql://u:secret@127.0.0.1/shop"} {
		s, err := store.Open(db)
		if err == nil {
			_ = s.Close()
			t.Errorf("Open(%q): got nil error, want one", db)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): error %q shows the password", db, err)
		}
	}
	// Nothing was created on the way.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files created: %v", entries)
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	s := open(t, ":memory:")
	p := newProduct(t, s, 1)
	if _, err := s.Product(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
}

func TestProductNotFound(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		if _, err := s.Product(ctx, 42); !errors.Is(err, seckill.ErrNotFound) {
			t.Errorf("Product: got %v, want ErrNotFound", err)
		}
		if err := s.SetStock(ctx, 42, 1); !errors.Is(err, seckill.ErrNotFound) {
			t.Errorf("SetStock: got %v, want ErrNotFound", err)
		}
	})
}

func TestClaimFence(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 5)
		if err := s.ClaimFence(ctx, p.ID, 100); err != nil {
			t.Fatalf("claim 100: %v", err)
		}
		for _, token := range []int64{100, 99} {
			if err := s.ClaimFence(ctx, p.ID, token); !errors.Is(err, seckill.ErrFenceRejected) {
				t.Errorf("claim %d after 100: got %v, want ErrFenceRejected", token, err)
			}
		}
		if err := s.ClaimFence(ctx, p.ID, 1_800_000_000_000_001); err != nil {
			t.Fatalf("claim a token of real magnitude: %v", err)
		}
		got, _ := s.Product(ctx, p.ID)
		if got.Fence != 1_800_000_000_000_001 {
			t.Errorf("fence: got %d, want 1800000000000001", got.Fence)
		}
	})
}

func TestPlaceOrderFenced(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 5)
		if err := s.ClaimFence(ctx, p.ID, 10); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()

		// A stale holder (token 9): nothing may be written, neither the stock
		// nor the order.
		stale := &seckill.Order{ProductID: p.ID, UserID: "old", Fence: 9, CreatedAt: now}
		if err := s.PlaceOrders(ctx, p.ID, 9, 4, []*seckill.Order{stale}); !errors.Is(err, seckill.ErrFenceRejected) {
			t.Fatalf("stale PlaceOrder: got %v, want ErrFenceRejected", err)
		}
		if _, err := s.SetStockFenced(ctx, p.ID, 100, 9); !errors.Is(err, seckill.ErrFenceRejected) {
			t.Fatalf("stale SetStockFenced: got %v, want ErrFenceRejected", err)
		}
		got, _ := s.Product(ctx, p.ID)
		if got.Stock != 5 || got.Sold != 0 {
			t.Fatalf("after stale writes: got stock %d sold %d, want 5 and 0", got.Stock, got.Sold)
		}

		// The current holder (token 10).
		o := &seckill.Order{ProductID: p.ID, UserID: "alice", Fence: 10, CreatedAt: now}
		if err := s.PlaceOrders(ctx, p.ID, 10, 4, []*seckill.Order{o}); err != nil {
			t.Fatalf("PlaceOrder: %v", err)
		}
		if o.ID == 0 {
			t.Error("PlaceOrder did not set the order id")
		}
		// The same user again: the unique index refuses, and the transaction
		// takes the stock write back with it.
		again := &seckill.Order{ProductID: p.ID, UserID: "alice", Fence: 10, CreatedAt: now}
		if err := s.PlaceOrders(ctx, p.ID, 10, 3, []*seckill.Order{again}); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("second PlaceOrder: got %v, want ErrAlreadyPurchased", err)
		}
		got, _ = s.Product(ctx, p.ID)
		if got.Stock != 4 || got.Sold != 1 {
			t.Errorf("got stock %d sold %d, want 4 and 1", got.Stock, got.Sold)
		}
		set, err := s.SetStockFenced(ctx, p.ID, 50, 10)
		if err != nil {
			t.Fatalf("SetStockFenced: %v", err)
		}
		if set.Stock != 50 || set.Sold != 1 || set.Fence != 10 {
			t.Errorf("SetStockFenced answered stock %d sold %d fence %d, want 50, 1 and 10", set.Stock, set.Sold, set.Fence)
		}
		if got, _ = s.Product(ctx, p.ID); got.Stock != 50 {
			t.Errorf("stock after restock: got %d, want 50", got.Stock)
		}
	})
}

func TestUnfencedWrites(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 1)
		o := &seckill.Order{ProductID: p.ID, UserID: "u1", CreatedAt: time.Now()}
		if err := s.InsertOrder(ctx, o); err != nil {
			t.Fatal(err)
		}
		dup := &seckill.Order{ProductID: p.ID, UserID: "u1", CreatedAt: time.Now()}
		if err := s.InsertOrder(ctx, dup); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Errorf("duplicate InsertOrder: got %v, want ErrAlreadyPurchased", err)
		}
		if err := s.SetStock(ctx, p.ID, 0); err != nil {
			t.Fatal(err)
		}
		has, err := s.HasOrder(ctx, p.ID, "u1")
		if err != nil || !has {
			t.Errorf("HasOrder(u1): got %v, %v, want true, nil", has, err)
		}
		if has, _ := s.HasOrder(ctx, p.ID, "u2"); has {
			t.Error("HasOrder(u2): got true, want false")
		}
	})
}

func TestOrdersPage(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 10)
		other := newProduct(t, s, 10)
		created := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
		for _, u := range []string{"a", "b", "c", "d"} {
			if err := s.InsertOrder(ctx, &seckill.Order{ProductID: p.ID, UserID: u, CreatedAt: created}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.InsertOrder(ctx, &seckill.Order{ProductID: other.ID, UserID: "a", CreatedAt: created}); err != nil {
			t.Fatal(err)
		}
		list, err := s.Orders(ctx, p.ID, seckill.OrderQuery{Limit: 2, Offset: 1})
		if err != nil {
			t.Fatal(err)
		}
		orders := list.Orders
		if list.Count == nil || *list.Count != 4 || len(orders) != 2 || orders[0].UserID != "b" || orders[1].UserID != "c" {
			t.Fatalf("got count %v, %d orders %v, want 4 and [b c]", list.Count, len(orders), orders)
		}
		if list.Next != orders[1].ID {
			t.Errorf("next: got %d, want %d (d is left)", list.Next, orders[1].ID)
		}
		if !orders[0].CreatedAt.Equal(created) {
			t.Errorf("created_at: got %v, want %v", orders[0].CreatedAt, created)
		}
		products, err := s.Products(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(products) != 2 || products[0].Sold != 4 || products[1].Sold != 1 {
			t.Errorf("got %d products, sold %v, want 2 products sold 4 and 1", len(products), products)
		}
	})
}
