package seckill_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// What CounterSale says it cannot keep, shown: a replica that stops
// between the database's move of a cancelled order and the counter's
// give-back leaves the unit reserved in the counter with no pending order
// to hold it, and its user in the buyer set. Nothing else gives it back:
// another replica's cancel finds the order cancelled, its expiry finds
// nothing due. The state checked inside the pause is what a crash there
// leaves for good; once the pause ends, the give-back repairs it (the
// control: the same checks pass).
func TestCounterSaleCrashBetweenMoveAndGiveBackLosesTheUnit(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		clk := newClock()
		crec := &counterRecorder{}
		var other life
		var otherR replica
		var inPause atomic.Bool
		var alice *seckill.Order
		crash := func(ctx context.Context, products []int64) {
			inPause.Store(true)
			if got := crec.returning.Load(); got != 1 {
				t.Errorf("units returning in the pause: got %d, want 1", got)
			}
			id := products[0]
			p, err := other.Product(ctx, id)
			if err != nil {
				t.Error(err)
				return
			}
			// The database: the order cancelled, no pending order. The
			// counter: the unit still reserved, none on sale.
			if got, _ := other.Order(ctx, alice.ID); got.State != seckill.OrderCancelled {
				t.Errorf("alice's order in the pause: %q, want cancelled", got.State)
			}
			if p.Stock != 0 || p.Reserved != 1 || p.Sold != 0 {
				t.Errorf("the counter in the pause: stock %d, reserved %d, sold %d; want 0, 1, 0", p.Stock, p.Reserved, p.Sold)
			}
			var pending int
			for _, o := range allOrders(t, otherR.st, id) {
				if o.State == seckill.OrderPending {
					pending++
				}
			}
			if pending != 0 {
				t.Errorf("pending orders in the pause: %d, want 0", pending)
			}
			// Nobody else gives the unit back, and alice cannot buy again.
			if _, err := other.Cancel(ctx, alice.ID, "alice"); !errors.Is(err, seckill.ErrOrderCancelled) {
				t.Errorf("another replica's cancel: got %v, want ErrOrderCancelled", err)
			}
			clk.set(alice.ExpiresAt.Add(time.Second))
			if n, err := other.ExpireDue(ctx); err != nil || n != 0 {
				t.Errorf("another replica's expiry: got %d, %v; want nothing due", n, err)
			}
			if _, err := other.Purchase(ctx, id, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
				t.Errorf("alice, her order cancelled: got %v, want ErrAlreadyPurchased from the buyer set", err)
			}
			if _, err := other.Purchase(ctx, id, "bob"); !errors.Is(err, seckill.ErrSoldOut) {
				t.Errorf("bob, the unit reserved for nobody: got %v, want ErrSoldOut", err)
			}
			clk.set(alice.CreatedAt)
		}
		l, r := e.lifeReplica("redis-counter", seckill.Options{PayWindow: time.Minute, Now: clk.Now, Counter: crec, ExpiryChaos: crash})
		other, otherR = e.lifeReplica("redis-counter", seckill.Options{PayWindow: time.Minute, Now: clk.Now})
		ctx := context.Background()
		p, err := l.CreateProduct(ctx, "phone", 1)
		if err != nil {
			t.Fatal(err)
		}
		if alice, err = l.Purchase(ctx, p.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Cancel(ctx, alice.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		if !inPause.Load() {
			t.Fatal("fault not injected: the cancel never paused between the database and the counter")
		}
		// The pause ended and the give-back came: the unit is on sale
		// again, alice may buy it.
		if got := checkLife(t, l, r, p.ID, 1); got.Stock != 1 || crec.returning.Load() != 0 {
			t.Errorf("after the give-back: stock %d, units returning %d; want 1 and 0", got.Stock, crec.returning.Load())
		}
		if _, err := l.Purchase(ctx, p.ID, "alice"); err != nil {
			t.Errorf("alice after the give-back: %v", err)
		}
	})
}

// A counter built from the database counts what pending orders hold as
// reserved and what paid ones hold as sold, from the supply recorded by
// the last restock; and a move whose counter was rebuilt between its
// epoch's read and its give-back (here: Redis flushed in the pause) is
// not given back again into the new counter, which read the move from the
// database: the unit comes back once.
func TestCounterRebuiltWithReservations(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		ctx := context.Background()
		flush := func() {
			t.Helper()
			if err := e.redis.Client().FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var flushed atomic.Bool
		var l life
		lose := func(ctx context.Context, products []int64) {
			if flushed.CompareAndSwap(false, true) {
				flush()
				// Built again at once, from the database that has the
				// move already.
				if _, err := l.Product(ctx, products[0]); err != nil {
					t.Error(err)
				}
			}
		}
		l, r := e.lifeReplica("redis-counter", seckill.Options{PayWindow: time.Hour, ExpiryChaos: lose})
		p, err := l.CreateProduct(ctx, "phone", 3)
		if err != nil {
			t.Fatal(err)
		}
		var orders []*seckill.Order
		for _, u := range []string{"a", "b", "c"} {
			o, err := l.Purchase(ctx, p.ID, u)
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
		}
		if _, err := l.Pay(ctx, orders[0].ID, "a"); err != nil {
			t.Fatal(err)
		}
		// A restock records the supply: 2 on sale, 2 reserved, 1 sold.
		if got, err := l.Restock(ctx, p.ID, 2); err != nil || got.Stock != 2 || got.Reserved != 2 || got.Sold != 1 {
			t.Fatalf("Restock: got %+v, %v; want stock 2, reserved 2, sold 1", got, err)
		}
		flush()
		if got := checkLife(t, l, r, p.ID, 5); got.Stock != 2 || got.Reserved != 2 || got.Sold != 1 {
			t.Errorf("rebuilt: stock %d, reserved %d, sold %d; want 2, 2, 1", got.Stock, got.Reserved, got.Sold)
		}
		// b's cancel: Redis loses the counter between the database's move
		// and the give-back, and the counter built again has the unit on
		// sale already: the give-back, with the epoch read before the
		// move, leaves it alone (else stock 4, one unit sold twice).
		if _, err := l.Cancel(ctx, orders[1].ID, "b"); err != nil {
			t.Fatal(err)
		}
		if !flushed.Load() {
			t.Fatal("fault not injected: Redis was not flushed in the pause")
		}
		if got := checkLife(t, l, r, p.ID, 5); got.Stock != 3 || got.Reserved != 1 {
			t.Errorf("after the cancel: stock %d, reserved %d; want 3 and 1, its unit back once", got.Stock, got.Reserved)
		}
		// c pays into the rebuilt counter, whose epoch it read.
		if _, err := l.Pay(ctx, orders[2].ID, "c"); err != nil {
			t.Fatal(err)
		}
		if got := checkLife(t, l, r, p.ID, 5); got.Reserved != 0 || got.Sold != 2 {
			t.Errorf("after c's payment: reserved %d, sold %d; want 0 and 2", got.Reserved, got.Sold)
		}
	})
}

// redis-counter-async has no payment window: built with one, it refuses
// at once rather than sell orders final at once under a setting that says
// otherwise.
func TestAsyncCounterSaleRefusesAPayWindow(t *testing.T) {
	e := newEnv(t)
	defer func() {
		if recover() == nil {
			t.Error("NewAsyncCounterSale with a payment window: no panic")
		}
	}()
	e.replica("redis-counter-async", seckill.Options{PayWindow: time.Minute})
}
