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
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// The life of a reservation in the designs without a lock (conditional.go,
// counter_sale.go): the same tests as life_test.go's for the locked
// design, on both databases.

// lifeDesigns are the designs without a lock that have a payment window.
var lifeDesigns = []string{"conditional", "redis-counter"}

// life is what a design with a payment window serves besides a sale.
type life interface {
	sale
	Order(ctx context.Context, id int64) (*seckill.Order, error)
	Pay(ctx context.Context, orderID int64, userID string) (*seckill.Order, error)
	Cancel(ctx context.Context, orderID int64, userID string) (*seckill.Order, error)
	ExpireDue(ctx context.Context) (int, error)
}

// lifeReplica is a replica of design with a payment window.
func (e *env) lifeReplica(design string, opts seckill.Options) (life, replica) {
	e.t.Helper()
	r := e.replica(design, opts)
	l, ok := r.sale.(life)
	if !ok {
		e.t.Fatalf("%s has no reservations", design)
	}
	return l, r
}

// checkLife fails unless the product, as the design reads it (the
// counter's numbers in redis-counter), has stock + reserved + sold == s,
// reserved equal to its pending orders and sold to its paid ones.
func checkLife(t *testing.T, l life, r replica, id, s int64) *seckill.Product {
	t.Helper()
	p, err := l.Product(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var pending, paid int64
	for _, o := range allOrders(t, r.st, id) {
		switch o.State {
		case seckill.OrderPending:
			pending++
		case seckill.OrderPaid:
			paid++
		}
	}
	if p.Stock+p.Reserved+p.Sold != s || p.Reserved != pending || p.Sold != paid || p.Stock < 0 {
		t.Errorf("product %d: stock %d + reserved %d + sold %d, want %d; %d pending and %d paid orders",
			id, p.Stock, p.Reserved, p.Sold, s, pending, paid)
	}
	return p
}

// A reservation is paid once, and never cancelled or paid again; another
// user may do neither.
func TestDesignReservationIsPaidOnce(t *testing.T) {
	t.Parallel()
	for _, design := range lifeDesigns {
		t.Run(design, func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				e := newEnvOn(t, db)
				clk := newClock()
				rec := newCounts()
				l, r := e.lifeReplica(design, seckill.Options{PayWindow: time.Hour, Now: clk.Now, Recorder: rec})
				ctx := context.Background()
				p, err := l.CreateProduct(ctx, "phone", 3)
				if err != nil {
					t.Fatal(err)
				}
				o, err := l.Purchase(ctx, p.ID, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if o.State != seckill.OrderPending || !o.ExpiresAt.Equal(o.CreatedAt.Add(time.Hour)) || o.ID == 0 {
					t.Fatalf("order: %+v; want pending, an hour after it was made, with an id", o)
				}
				if got := checkLife(t, l, r, p.ID, 3); got.Stock != 2 || got.Reserved != 1 {
					t.Errorf("after the purchase: stock %d, reserved %d; want 2 and 1", got.Stock, got.Reserved)
				}
				if _, err := l.Pay(ctx, o.ID, "bob"); !errors.Is(err, seckill.ErrNotYourOrder) {
					t.Errorf("bob pays alice's order: got %v, want ErrNotYourOrder", err)
				}
				paid, err := l.Pay(ctx, o.ID, "alice")
				if err != nil || paid.State != seckill.OrderPaid || !paid.ClosedAt.Equal(clk.Now()) {
					t.Fatalf("Pay: got %+v, %v; want paid, closed now", paid, err)
				}
				if got := checkLife(t, l, r, p.ID, 3); got.Sold != 1 || got.Reserved != 0 {
					t.Errorf("after the payment: sold %d, reserved %d; want 1 and 0", got.Sold, got.Reserved)
				}
				for name, move := range map[string]func(context.Context, int64, string) (*seckill.Order, error){"pay": l.Pay, "cancel": l.Cancel} {
					if _, err := move(ctx, o.ID, "alice"); !errors.Is(err, seckill.ErrOrderPaid) {
						t.Errorf("%s a paid order: got %v, want ErrOrderPaid", name, err)
					}
				}
				if _, err := l.Purchase(ctx, p.ID, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
					t.Errorf("alice buys again, holding a paid order: got %v, want ErrAlreadyPurchased", err)
				}
				if _, err := l.Pay(ctx, 4242, "alice"); !errors.Is(err, seckill.ErrOrderNotFound) {
					t.Errorf("pay no such order: got %v, want ErrOrderNotFound", err)
				}
				checkLife(t, l, r, p.ID, 3)
				if got := rec.closedTo(seckill.OrderPaid); got != 1 {
					t.Errorf("orders recorded paid: got %d, want 1", got)
				}
			})
		})
	}
}

// A cancel puts the unit back on sale once, and its user may buy again.
func TestDesignCancelReturnsTheUnitOnce(t *testing.T) {
	t.Parallel()
	for _, design := range lifeDesigns {
		t.Run(design, func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				e := newEnvOn(t, db)
				l, r := e.lifeReplica(design, seckill.Options{PayWindow: time.Hour})
				ctx := context.Background()
				p, err := l.CreateProduct(ctx, "phone", 1)
				if err != nil {
					t.Fatal(err)
				}
				o, err := l.Purchase(ctx, p.ID, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Purchase(ctx, p.ID, "bob"); !errors.Is(err, seckill.ErrSoldOut) {
					t.Fatalf("bob, the only unit reserved: got %v, want ErrSoldOut", err)
				}
				if _, err := l.Cancel(ctx, o.ID, "bob"); !errors.Is(err, seckill.ErrNotYourOrder) {
					t.Errorf("bob cancels alice's order: got %v, want ErrNotYourOrder", err)
				}
				c, err := l.Cancel(ctx, o.ID, "alice")
				if err != nil || c.State != seckill.OrderCancelled {
					t.Fatalf("Cancel: got %+v, %v; want cancelled", c, err)
				}
				if got := checkLife(t, l, r, p.ID, 1); got.Stock != 1 {
					t.Errorf("after the cancel: stock %d, want 1: the unit back on sale", got.Stock)
				}
				for name, move := range map[string]func(context.Context, int64, string) (*seckill.Order, error){"pay": l.Pay, "cancel": l.Cancel} {
					if _, err := move(ctx, o.ID, "alice"); !errors.Is(err, seckill.ErrOrderCancelled) {
						t.Errorf("%s a cancelled order: got %v, want ErrOrderCancelled", name, err)
					}
				}
				if got := checkLife(t, l, r, p.ID, 1); got.Stock != 1 {
					t.Errorf("after the second cancel: stock %d, want 1: the unit came back once", got.Stock)
				}
				// alice may buy again; then the unit is hers, and bob's
				// answer is sold out.
				again, err := l.Purchase(ctx, p.ID, "alice")
				if err != nil {
					t.Fatalf("alice after her cancel: %v, want a new reservation", err)
				}
				if _, err := l.Purchase(ctx, p.ID, "bob"); !errors.Is(err, seckill.ErrSoldOut) {
					t.Errorf("bob, alice holding the unit again: got %v, want ErrSoldOut", err)
				}
				if _, err := l.Pay(ctx, again.ID, "alice"); err != nil {
					t.Errorf("alice pays her second order: %v", err)
				}
				checkLife(t, l, r, p.ID, 1)
			})
		})
	}
}

// An expiry returns the units of every due order once, across products;
// a payment after the window is refused with nothing taken, whether or
// not a replica has expired the order yet; the sold-out product reopens
// and the expired order's user may buy again.
func TestDesignExpiryReturnsUnitsOnce(t *testing.T) {
	t.Parallel()
	for _, design := range lifeDesigns {
		t.Run(design, func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				e := newEnvOn(t, db)
				clk := newClock()
				rec := newCounts()
				l, r := e.lifeReplica(design, seckill.Options{PayWindow: 10 * time.Second, Now: clk.Now, Recorder: rec})
				ctx := context.Background()
				var products []*seckill.Product
				var orders []*seckill.Order
				for range 5 {
					p, err := l.CreateProduct(ctx, "phone", 2)
					if err != nil {
						t.Fatal(err)
					}
					products = append(products, p)
					for _, u := range []string{"a", "b"} {
						o, err := l.Purchase(ctx, p.ID, u)
						if err != nil {
							t.Fatal(err)
						}
						orders = append(orders, o)
					}
					if _, err := l.Purchase(ctx, p.ID, "late"); !errors.Is(err, seckill.ErrSoldOut) {
						t.Fatalf("late buyer: got %v, want ErrSoldOut", err)
					}
				}
				first := orders[0]
				clk.set(orders[len(orders)-1].ExpiresAt)
				if _, err := l.Pay(ctx, first.ID, "a"); !errors.Is(err, seckill.ErrOrderExpired) {
					t.Fatalf("pay at the window's end: got %v, want ErrOrderExpired", err)
				}
				if o, _ := l.Order(ctx, first.ID); o.State != seckill.OrderPending {
					t.Fatalf("the refused payment moved the order to %q", o.State)
				}
				n, err := l.ExpireDue(ctx)
				if err != nil || n != len(orders) {
					t.Fatalf("ExpireDue: got %d, %v; want all %d expired", n, err, len(orders))
				}
				for _, o := range orders {
					got, _ := l.Order(ctx, o.ID)
					if got.State != seckill.OrderExpired || got.ClosedAt.IsZero() {
						t.Errorf("order %d after the expiry: %q, closed at %v; want expired, with when", o.ID, got.State, got.ClosedAt)
					}
				}
				for _, p := range products {
					if got := checkLife(t, l, r, p.ID, 2); got.Stock != 2 {
						t.Errorf("product %d after the expiry: stock %d, want 2", p.ID, got.Stock)
					}
				}
				if n, err := l.ExpireDue(ctx); err != nil || n != 0 {
					t.Errorf("a second ExpireDue: got %d, %v; want nothing more expired", n, err)
				}
				if _, err := l.Pay(ctx, first.ID, "a"); !errors.Is(err, seckill.ErrOrderExpired) {
					t.Errorf("pay an expired order: got %v, want ErrOrderExpired", err)
				}
				for _, u := range []string{"late", "a"} {
					if _, err := l.Purchase(ctx, products[0].ID, u); err != nil {
						t.Errorf("%s after the expiry: %v, want a new reservation", u, err)
					}
				}
				checkLife(t, l, r, products[0].ID, 2)
				if got := rec.closedTo(seckill.OrderExpired); got != len(orders) {
					t.Errorf("orders recorded expired: got %d, want %d", got, len(orders))
				}
			})
		})
	}
}

// A payment and an expiry race for the same orders, on two replicas
// whose clocks are a few milliseconds apart, so that both may move each
// order. Each order moves once, and every unit is counted once.
func TestDesignPaymentRacingExpiryMovesEachOrderOnce(t *testing.T) {
	t.Parallel()
	for _, design := range lifeDesigns {
		t.Run(design, func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				e := newEnvOn(t, db)
				payClock, expireClock := newClock(), newClock()
				payer, r := e.lifeReplica(design, seckill.Options{PayWindow: time.Minute, Now: payClock.Now})
				expirer, _ := e.lifeReplica(design, seckill.Options{PayWindow: time.Minute, Now: expireClock.Now})
				ctx := context.Background()
				const n = 60
				p, err := payer.CreateProduct(ctx, "phone", n)
				if err != nil {
					t.Fatal(err)
				}
				var orders []*seckill.Order
				for i := range n {
					o, err := payer.Purchase(ctx, p.ID, fmt.Sprintf("u%d", i))
					if err != nil {
						t.Fatal(err)
					}
					orders = append(orders, o)
				}
				payClock.set(orders[0].ExpiresAt.Add(-time.Millisecond))
				expireClock.set(orders[len(orders)-1].ExpiresAt.Add(time.Millisecond))
				nPaid, nExpired := racePaysAndExpiry(t, ctx, payer, expirer, orders)
				got := checkLife(t, payer, r, p.ID, n)
				t.Logf("of %d orders, %d paid and %d expired in the race; stock %d, sold %d", n, nPaid, nExpired, got.Stock, got.Sold)
			})
		})
	}
}

// Two replicas expire the same due orders at once: the database's move
// decides which replica expires which order, and each unit comes back
// once. The second replica's pass runs while the first is between the
// database's move and its units' return (its ExpiryChaos, in
// redis-counter), so the units are moved and not yet back: the second
// finds nothing due, and gives back nothing.
func TestDesignTwoExpiriesReturnEachUnitOnce(t *testing.T) {
	t.Parallel()
	for _, design := range lifeDesigns {
		t.Run(design, func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				e := newEnvOn(t, db)
				clk := newClock()
				var second atomic.Int64
				second.Store(-1)
				var other life
				between := func(ctx context.Context, _ []int64) {
					n, err := other.ExpireDue(ctx)
					if err != nil {
						t.Error(err)
					}
					second.Store(int64(n))
				}
				first, r := e.lifeReplica(design, seckill.Options{PayWindow: time.Second, Now: clk.Now, ExpiryChaos: between})
				other, _ = e.lifeReplica(design, seckill.Options{PayWindow: time.Second, Now: clk.Now})
				ctx := context.Background()
				var ps []*seckill.Product
				var due time.Time
				for range 3 {
					p, err := first.CreateProduct(ctx, "phone", 4)
					if err != nil {
						t.Fatal(err)
					}
					ps = append(ps, p)
					for i := range 4 {
						o, err := first.Purchase(ctx, p.ID, fmt.Sprintf("u%d", i))
						if err != nil {
							t.Fatal(err)
						}
						due = o.ExpiresAt
					}
				}
				clk.set(due)
				if design == "conditional" {
					// No step between its move and its units' return: the
					// two passes race.
					var wg sync.WaitGroup
					var total atomic.Int64
					for _, l := range []life{first, other} {
						wg.Go(func() {
							n, err := l.ExpireDue(ctx)
							if err != nil {
								t.Error(err)
							}
							total.Add(int64(n))
						})
					}
					wg.Wait()
					if total.Load() != 12 {
						t.Errorf("expired by both: got %d, want 12, each order once", total.Load())
					}
				} else {
					n, err := first.ExpireDue(ctx)
					if err != nil || n != 12 || second.Load() != 0 {
						t.Errorf("expired: first %d (%v), the second in between %d; want 12 and 0", n, err, second.Load())
					}
				}
				for _, p := range ps {
					if got := checkLife(t, first, r, p.ID, 4); got.Stock != 4 {
						t.Errorf("product %d: stock %d, want 4, every unit back once", p.ID, got.Stock)
					}
				}
			})
		})
	}
}
