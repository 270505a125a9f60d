package seckill_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// BenchmarkExpireDue is the time one replica takes to expire 100,000 due
// reservations over 2,000 products (50 each), on SQLite and PostgreSQL:
// one ExpireDue, its rounds of 128 products (their locks in one round
// trip, one transaction fenced per product), from a database where every
// order's window has ended. Each iteration fills the database anew,
// outside the timed part:
//
//	go test -run '^$' -bench ExpireDue -benchtime 3x ./internal/seckill
func BenchmarkExpireDue(b *testing.B) {
	const products, perProduct = 2000, 50
	rds := redistest.Start(b)
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run("db="+kind, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				db := filepath.Join(b.TempDir(), "seckill.db")
				if kind == "postgres" {
					db = pgtest.Database(b)
				}
				expireOnce(b, rds, db, products, perProduct)
			}
		})
	}
}

// expireOnce fills db with products, each with perProduct orders past
// their window, and times one ExpireDue of them all.
func expireOnce(b *testing.B, rds *redistest.Server, db string, products, perProduct int) {
	st, err := store.Open(db)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	l, err := lock.New(rds.Client(), lock.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	clk := newClock()
	svc := seckill.NewService(redisLocker{l}, st, seckill.Options{PayWindow: time.Second, Now: clk.Now})
	ctx := context.Background()
	now := clk.Now()
	for i := range products {
		p := &seckill.Product{Name: "p", Stock: int64(perProduct)}
		if err := st.CreateProduct(ctx, p); err != nil {
			b.Fatal(err)
		}
		token := int64(i + 1)
		if err := st.ClaimFence(ctx, p.ID, token); err != nil {
			b.Fatal(err)
		}
		orders := make([]*seckill.Order, perProduct)
		for j := range orders {
			orders[j] = &seckill.Order{ProductID: p.ID, UserID: fmt.Sprintf("u%d", j), Fence: token, CreatedAt: now,
				State: seckill.OrderPending, ExpiresAt: now.Add(time.Second)}
		}
		if err := st.PlaceOrders(ctx, p.ID, token, 0, orders); err != nil {
			b.Fatal(err)
		}
	}
	clk.set(now.Add(time.Minute))
	b.StartTimer()
	start := time.Now()
	n, err := svc.ExpireDue(ctx)
	took := time.Since(start)
	b.StopTimer()
	if err != nil || n != products*perProduct {
		b.Fatalf("ExpireDue: %d, %v; want %d expired", n, err, products*perProduct)
	}
	b.ReportMetric(took.Seconds(), "s/pass")
	b.ReportMetric(float64(n)/took.Seconds(), "orders/s")
}
