package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// BenchmarkSQLiteSharedRead: the fast path's shared read on SQLite
// (ProductsAndBuyers), as a flash sale's sold-out answers make it: 32
// buyers over 8 products of 1,000 orders each, a quarter of the buyers
// with an order; and one product with one buyer (ProductAndBuyers).
//
//	go test -run '^$' -bench SQLiteSharedRead -benchtime 20000x ./store
func BenchmarkSQLiteSharedRead(b *testing.B) {
	db := filepath.Join(b.TempDir(), "seckill.db")
	s := open(b, db)
	ctx := context.Background()
	var want []seckill.BuyersOf
	for range 8 {
		p := &seckill.Product{Name: "phone", Stock: 1}
		if err := s.CreateProduct(ctx, p); err != nil {
			b.Fatal(err)
		}
		fillOrders(b, db, p.ID, 1000)
		w := seckill.BuyersOf{ProductID: p.ID}
		w.UserIDs = []string{"fill-500", "new-1", "new-2", "new-3"}
		want = append(want, w)
	}
	b.Run("products=8/buyers=32", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.ProductsAndBuyers(ctx, want); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("products=1/buyers=1", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.ProductAndBuyers(ctx, want[0].ProductID, want[0].UserIDs[:1]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
