package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// BenchmarkPostgresOneProduct: a round of one product (64 buyers) through
// the statements of one product ("one", what the store's calls send) and
// through those of several ("several"), each step on its own: the claim
// and read, the write, the shared read. Both run twice, in turn:
//
//	go test -run '^$' -bench PostgresOneProduct -benchtime 3000x ./store
func BenchmarkPostgresOneProduct(b *testing.B) {
	s, err := store.Open(pgtest.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	several := store.Several(s)
	ctx := context.Background()
	p := &seckill.Product{Name: "phone", Stock: seckill.MaxStock}
	if err := s.CreateProduct(ctx, p); err != nil {
		b.Fatal(err)
	}
	users := make([]string, 64)
	var token int64
	n := 0
	// next takes the next token and 64 new buyers, and returns their orders.
	next := func() []*seckill.Order {
		token++
		orders := make([]*seckill.Order, len(users))
		for i := range orders {
			n++
			users[i] = fmt.Sprint("u", n)
			orders[i] = &seckill.Order{ProductID: p.ID, UserID: users[i], Fence: token}
		}
		return orders
	}
	check := func(b *testing.B, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"one", "several", "one", "several"} {
		b.Run("claim-and-read/"+mode, func(b *testing.B) {
			for b.Loop() {
				next()
				claims := []seckill.Claim{{ProductID: p.ID, Token: token, UserIDs: users}}
				var got []seckill.Claimed
				var err error
				if mode == "one" {
					got, err = s.ClaimAndReadAll(ctx, claims)
				} else {
					got, err = several.ClaimAndReadAll(ctx, claims)
				}
				check(b, err)
				check(b, got[0].Err)
			}
		})
		b.Run("place/"+mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				orders := next()
				check(b, s.ClaimFence(ctx, p.ID, token))
				b.StartTimer()
				ps := []seckill.Placement{{ProductID: p.ID, Token: token, NewStock: seckill.MaxStock, Orders: orders}}
				var refused []error
				var err error
				if mode == "one" {
					refused, err = s.PlaceOrdersAll(ctx, ps)
				} else {
					refused, err = several.PlaceOrdersAll(ctx, ps)
				}
				check(b, err)
				check(b, refused[0])
			}
		})
		b.Run("read/"+mode, func(b *testing.B) {
			for b.Loop() {
				next()
				want := []seckill.BuyersOf{{ProductID: p.ID, UserIDs: users}}
				var err error
				if mode == "one" {
					_, _, err = s.ProductsAndBuyers(ctx, want)
				} else {
					_, _, err = several.ProductsAndBuyers(ctx, want)
				}
				check(b, err)
			}
		})
	}
}
