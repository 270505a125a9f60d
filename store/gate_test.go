package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/store"
)

// TestSQLiteWritersTakeTurnsAtTheGate: while one of the process's writers
// holds the gate, another waits in Go (not in SQLite's busy handler), gives
// up when its context ends having written nothing, and writes once the
// gate is free; reads do not wait for it.
func TestSQLiteWritersTakeTurnsAtTheGate(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir()+"/seckill.db")
	p := newProduct(t, s, 5)
	ctx := context.Background()
	if err := s.ClaimFence(ctx, p.ID, 1); err != nil {
		t.Fatal(err)
	}

	release, ok := store.HoldGate(s)
	if !ok {
		t.Fatal("a SQLite store has no write gate")
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.PlaceOrders(cctx, p.ID, 1, 4, []*seckill.Order{{ProductID: p.ID, UserID: "u1"}})
	}()
	// A read answers while the gate is held.
	if got, err := s.Product(ctx, p.ID); err != nil || got.Stock != 5 {
		t.Fatalf("Product while the gate is held = %+v, %v; want stock 5", got, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PlaceOrders waiting at the gate, its context ended: %v, want context.Canceled", err)
	}
	if got, _ := s.Product(ctx, p.ID); got.Stock != 5 || got.Sold != 0 {
		t.Fatalf("after the abandoned write: stock %d sold %d, want 5 and 0", got.Stock, got.Sold)
	}

	go func() {
		done <- s.PlaceOrders(ctx, p.ID, 1, 4, []*seckill.Order{{ProductID: p.ID, UserID: "u1"}})
	}()
	release()
	if err := <-done; err != nil {
		t.Fatalf("PlaceOrders once the gate is free: %v", err)
	}
	if got, _ := s.Product(ctx, p.ID); got.Stock != 4 || got.Sold != 1 {
		t.Fatalf("after the write: stock %d sold %d, want 4 and 1", got.Stock, got.Sold)
	}
}
