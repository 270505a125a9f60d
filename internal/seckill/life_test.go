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
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// clock is a settable clock for a Service (Options.Now).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().UTC().Truncate(time.Millisecond)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// checkSupply fails unless p's stock + reserved + sold is s, and its
// reserved and sold counts are those of its pending and paid orders.
func checkSupply(t *testing.T, st *store.Store, id, s int64) *seckill.Product {
	t.Helper()
	ctx := context.Background()
	p, err := st.Product(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var pending, paid int64
	for _, o := range allOrdersOf(t, st, id) {
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

func allOrdersOf(t *testing.T, st *store.Store, id int64) []*seckill.Order {
	t.Helper()
	var all []*seckill.Order
	q := seckill.OrderQuery{Limit: seckill.MaxOrderLimit, Cursor: true}
	for {
		page, err := st.Orders(context.Background(), id, q)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Orders...)
		if page.Next == 0 {
			return all
		}
		q.After = page.Next
	}
}

// A reservation's life: pending with its window, paid once, and never
// cancelled or paid again; another user may do neither.
func TestReservationIsPaidOnce(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		clk := newClock()
		rec := newCounts()
		svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Hour, Now: clk.Now, Recorder: rec})
		ctx := context.Background()
		p := e.product(st, 3)
		o, err := svc.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if o.State != seckill.OrderPending || !o.ExpiresAt.Equal(o.CreatedAt.Add(time.Hour)) {
			t.Fatalf("order: state %q, expires %v, created %v; want pending, an hour after it was made", o.State, o.ExpiresAt, o.CreatedAt)
		}
		if got := checkSupply(t, st, p.ID, 3); got.Stock != 2 || got.Reserved != 1 {
			t.Errorf("after the purchase: stock %d, reserved %d; want 2 and 1", got.Stock, got.Reserved)
		}
		if _, err := svc.Pay(ctx, o.ID, "bob"); !errors.Is(err, seckill.ErrNotYourOrder) {
			t.Errorf("bob pays alice's order: got %v, want ErrNotYourOrder", err)
		}
		paid, err := svc.Pay(ctx, o.ID, "alice")
		if err != nil || paid.State != seckill.OrderPaid || !paid.ClosedAt.Equal(clk.Now()) {
			t.Fatalf("Pay: got %+v, %v; want paid, closed now", paid, err)
		}
		if got := checkSupply(t, st, p.ID, 3); got.Sold != 1 || got.Reserved != 0 {
			t.Errorf("after the payment: sold %d, reserved %d; want 1 and 0", got.Sold, got.Reserved)
		}
		for name, move := range map[string]func(context.Context, int64, string) (*seckill.Order, error){"pay": svc.Pay, "cancel": svc.Cancel} {
			if _, err := move(ctx, o.ID, "alice"); !errors.Is(err, seckill.ErrOrderPaid) {
				t.Errorf("%s a paid order: got %v, want ErrOrderPaid", name, err)
			}
		}
		if _, err := svc.Purchase(ctx, p.ID, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Errorf("alice buys again, holding a paid order: got %v, want ErrAlreadyPurchased", err)
		}
		if _, err := svc.Pay(ctx, 4242, "alice"); !errors.Is(err, seckill.ErrOrderNotFound) {
			t.Errorf("pay no such order: got %v, want ErrOrderNotFound", err)
		}
		checkSupply(t, st, p.ID, 3)
		if got := rec.closedTo(seckill.OrderPaid); got != 1 {
			t.Errorf("orders recorded paid: got %d, want 1", got)
		}
	})
}

// A cancel puts the unit back on sale, once, and its user may buy again.
func TestCancelReturnsTheUnitOnce(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Hour})
		ctx := context.Background()
		p := e.product(st, 1)
		o, err := svc.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Purchase(ctx, p.ID, "bob"); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("bob, the only unit reserved: got %v, want ErrSoldOut", err)
		}
		if _, err := svc.Cancel(ctx, o.ID, "bob"); !errors.Is(err, seckill.ErrNotYourOrder) {
			t.Errorf("bob cancels alice's order: got %v, want ErrNotYourOrder", err)
		}
		c, err := svc.Cancel(ctx, o.ID, "alice")
		if err != nil || c.State != seckill.OrderCancelled {
			t.Fatalf("Cancel: got %+v, %v; want cancelled", c, err)
		}
		if got := checkSupply(t, st, p.ID, 1); got.Stock != 1 {
			t.Errorf("after the cancel: stock %d, want 1: the unit back on sale", got.Stock)
		}
		for name, move := range map[string]func(context.Context, int64, string) (*seckill.Order, error){"pay": svc.Pay, "cancel": svc.Cancel} {
			if _, err := move(ctx, o.ID, "alice"); !errors.Is(err, seckill.ErrOrderCancelled) {
				t.Errorf("%s a cancelled order: got %v, want ErrOrderCancelled", name, err)
			}
		}
		checkSupply(t, st, p.ID, 1)
		// The unit is sold again, and alice may buy again too.
		if _, err := svc.Purchase(ctx, p.ID, "bob"); err != nil {
			t.Fatalf("bob, the unit back: %v", err)
		}
		if _, err := svc.Purchase(ctx, p.ID, "alice"); !errors.Is(err, seckill.ErrSoldOut) {
			t.Errorf("alice, bob holding the unit: got %v, want ErrSoldOut", err)
		}
		checkSupply(t, st, p.ID, 1)
	})
}

// An expiry returns the units of every due order once, across products,
// and a payment after the window is refused with nothing taken, whether
// or not a replica has expired the order yet. The sold-out fast path
// reopens: the next buyer gets the unit.
func TestExpiryReturnsUnitsOnce(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		clk := newClock()
		rec := newCounts()
		const window = 10 * time.Second
		svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: window, Now: clk.Now, Recorder: rec, BatchMax: 16})
		ctx := context.Background()
		var products []*seckill.Product
		var orders []*seckill.Order
		for range 5 {
			p := e.product(st, 2)
			products = append(products, p)
			for _, u := range []string{"a", "b"} {
				o, err := svc.Purchase(ctx, p.ID, u)
				if err != nil {
					t.Fatal(err)
				}
				orders = append(orders, o)
			}
			if _, err := svc.Purchase(ctx, p.ID, "late"); !errors.Is(err, seckill.ErrSoldOut) {
				t.Fatalf("late buyer: got %v, want ErrSoldOut", err)
			}
		}
		first := orders[0]
		// Past the window, before any expiry: the payment is refused and
		// the order stays as it was.
		clk.set(first.ExpiresAt)
		if _, err := svc.Pay(ctx, first.ID, "a"); !errors.Is(err, seckill.ErrOrderExpired) {
			t.Fatalf("pay at the window's end: got %v, want ErrOrderExpired", err)
		}
		if o, _ := st.Order(ctx, first.ID); o.State != seckill.OrderPending {
			t.Fatalf("the refused payment moved the order to %q", o.State)
		}
		n, err := svc.ExpireDue(ctx)
		if err != nil || n != len(orders) {
			t.Fatalf("ExpireDue: got %d, %v; want all %d expired", n, err, len(orders))
		}
		for _, o := range orders {
			got, _ := st.Order(ctx, o.ID)
			if got.State != seckill.OrderExpired || got.ClosedAt.IsZero() {
				t.Errorf("order %d after the expiry: %q, closed at %v; want expired, with when", o.ID, got.State, got.ClosedAt)
			}
		}
		for _, p := range products {
			if got := checkSupply(t, st, p.ID, 2); got.Stock != 2 {
				t.Errorf("product %d after the expiry: stock %d, want 2", p.ID, got.Stock)
			}
		}
		if n, err := svc.ExpireDue(ctx); err != nil || n != 0 {
			t.Errorf("a second ExpireDue: got %d, %v; want nothing more expired", n, err)
		}
		if _, err := svc.Pay(ctx, first.ID, "a"); !errors.Is(err, seckill.ErrOrderExpired) {
			t.Errorf("pay an expired order: got %v, want ErrOrderExpired", err)
		}
		// Sold again: the late buyer, and a, whose order expired.
		for _, u := range []string{"late", "a"} {
			if _, err := svc.Purchase(ctx, products[0].ID, u); err != nil {
				t.Errorf("%s after the expiry: %v, want a new reservation", u, err)
			}
		}
		checkSupply(t, st, products[0].ID, 2)
		if got := rec.closedTo(seckill.OrderExpired); got != len(orders) {
			t.Errorf("orders recorded expired: got %d, want %d", got, len(orders))
		}
	})
}

// A payment and an expiry that race for the same orders: the replica that
// pays reads its clock just inside the window, the one that expires just
// past it (clocks a few milliseconds apart), so both may move each order.
// Each order moves once: a payment that succeeded is never expired, an
// expired order was never paid, and every unit is counted once.
func TestPaymentRacingExpiryMovesEachOrderOnce(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		payClock, expireClock := newClock(), newClock()
		const window = time.Minute
		opts := seckill.Options{PayWindow: window, BatchMax: 16}
		opts.Now = payClock.Now
		payer := seckill.NewService(e.locker(lock.Options{}), st, opts)
		opts.Now = expireClock.Now
		expirer := seckill.NewService(e.locker(lock.Options{}), e.store(), opts)
		ctx := context.Background()
		const n = 60
		p := e.product(st, n)
		var orders []*seckill.Order
		for i := range n {
			o, err := payer.Purchase(ctx, p.ID, fmt.Sprintf("u%d", i))
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
		}
		edge := orders[len(orders)-1].ExpiresAt
		payClock.set(orders[0].ExpiresAt.Add(-time.Millisecond))
		expireClock.set(edge.Add(time.Millisecond))
		nPaid, nExpired := racePaysAndExpiry(t, ctx, payer, expirer, orders)
		got := checkSupply(t, st, p.ID, n)
		t.Logf("of %d orders, %d paid and %d expired in the race; stock %d, sold %d", n, nPaid, nExpired, got.Stock, got.Sold)
	})
}

// An expiry whose lease ran out while it worked (a newer holder claimed
// the product's fence meanwhile) writes nothing: its orders stay pending
// and no unit comes back twice; the next pass expires them.
func TestStaleExpiryIsFenced(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		e := newEnvOn(t, db)
		st := e.store()
		clk := newClock()
		rec := newCounts()
		var once atomic.Bool
		newer := func(ctx context.Context, products []int64) {
			if once.CompareAndSwap(false, true) {
				for _, id := range products {
					if err := st.ClaimFence(ctx, id, time.Now().Add(time.Hour).UnixMicro()); err != nil {
						t.Error(err)
					}
				}
			}
		}
		svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now, Recorder: rec, ExpiryChaos: newer})
		ctx := context.Background()
		p := e.product(st, 1)
		o, err := svc.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		clk.set(o.ExpiresAt)
		if n, err := svc.ExpireDue(ctx); err != nil || n != 0 {
			t.Fatalf("the stale expiry: got %d expired, %v; want none", n, err)
		}
		if !once.Load() || rec.fence(seckill.FenceWrite) != 1 {
			t.Fatalf("fault not injected or not refused: chaos ran %v, write rejections %d", once.Load(), rec.fence(seckill.FenceWrite))
		}
		if got := checkSupply(t, st, p.ID, 1); got.Stock != 0 || got.Reserved != 1 {
			t.Errorf("after the refused expiry: stock %d, reserved %d; want 0 and 1, nothing written", got.Stock, got.Reserved)
		}
	})
}

// An expiry counts the products it holds whose orders it has not yet
// written (Recorder.ExpiriesInProgress): inside its critical section, the
// round's products; once its write has returned, none, whether the write
// landed or the fence refused it. A replica killed or stalled there is
// what the count shows from outside.
func TestExpiriesInProgressAreCounted(t *testing.T) {
	e := newEnv(t)
	st := e.store()
	clk := newClock()
	rec := newCounts()
	var mu sync.Mutex
	var inside []int // the count, each time an expiry was in its critical section
	var refuse atomic.Bool
	hook := func(ctx context.Context, products []int64) {
		mu.Lock()
		inside = append(inside, rec.inProgress())
		mu.Unlock()
		if refuse.Load() { // a newer holder's claim: the write is refused
			for _, id := range products {
				if err := st.ClaimFence(ctx, id, time.Now().Add(time.Hour).UnixMicro()); err != nil {
					t.Error(err)
				}
			}
		}
	}
	svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now, Recorder: rec, ExpiryChaos: hook})
	ctx := context.Background()
	a, b := e.product(st, 2), e.product(st, 2)
	buy := func(user string) time.Time {
		var due time.Time
		for _, p := range []*seckill.Product{a, b} {
			o, err := svc.Purchase(ctx, p.ID, user)
			if err != nil {
				t.Fatal(err)
			}
			due = o.ExpiresAt
		}
		return due
	}
	clk.set(buy("alice"))
	if n, err := svc.ExpireDue(ctx); err != nil || n != 2 {
		t.Fatalf("ExpireDue: got %d expired, %v; want alice's 2", n, err)
	}
	refuse.Store(true)
	clk.set(buy("bob"))
	if n, err := svc.ExpireDue(ctx); err != nil || n != 0 || rec.fence(seckill.FenceWrite) != 2 {
		t.Fatalf("the refused expiry: got %d expired, %v, %d writes refused; want 0, nil and 2", n, err, rec.fence(seckill.FenceWrite))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(inside) != 2 || inside[0] != 2 || inside[1] != 2 {
		t.Errorf("in progress inside the critical sections: got %v, want [2 2] (one round of both products, twice)", inside)
	}
	if got := rec.inProgress(); got != 0 {
		t.Errorf("in progress after the expiries returned: got %d, want 0", got)
	}
}

// A product whose lock another process holds is not skipped: the expiry
// waits for it in the lock's queue and expires its orders once it comes.
func TestExpiryWaitsForALockHeldElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.store()
	clk := newClock()
	svc := seckill.NewService(e.locker(lock.Options{WaitTimeout: time.Minute}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now})
	ctx := context.Background()
	a, b := e.product(st, 1), e.product(st, 1)
	var due time.Time
	for _, p := range []*seckill.Product{a, b} {
		o, err := svc.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		due = o.ExpiresAt
	}
	clk.set(due)
	held, err := e.locker(lock.Options{}).Acquire(ctx, seckill.LockName(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		n, _ := svc.ExpireDue(ctx)
		done <- n
	}()
	// b, whose lock is free, is expired while a's lock is still held.
	poll.Eventually(t, 10*time.Second, "b expired while a's lock is held elsewhere", func() bool {
		got, _ := st.Product(ctx, b.ID)
		return got.Stock == 1
	})
	if got, _ := st.Product(ctx, a.ID); got.Stock != 0 {
		t.Fatalf("a was expired while another process held its lock: stock %d", got.Stock)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 2 {
		t.Errorf("ExpireDue: got %d expired, want 2", n)
	}
	checkSupply(t, st, a.ID, 1)
	checkSupply(t, st, b.ID, 1)
}

// The controls of a reservation's life each break the supply in the way
// the load test's checks must catch: an expiry that adds the units back
// outside the lock loses a purchase's decrement, one that checks no state
// expires a paid order, and a payment accepted after the expiry counts a
// unit that went back on sale as sold again.
func TestUnsafeLifeControlsBreakTheSupply(t *testing.T) {
	t.Parallel()
	supply := func(t *testing.T, st *store.Store, id int64) int64 {
		t.Helper()
		p, err := st.Product(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return p.Stock + p.Reserved + p.Sold
	}
	t.Run("unlocked expiry", func(t *testing.T) {
		e := newEnv(t)
		st := e.store()
		clk := newClock()
		p := e.product(st, 2)
		buyer := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now})
		ctx := context.Background()
		o, err := buyer.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		clk.set(o.ExpiresAt)
		// Between the expiry's read and its write-back, bob buys.
		var bought atomic.Bool
		between := func(ctx context.Context, _ []int64) {
			if _, err := buyer.Purchase(ctx, p.ID, "bob"); err != nil {
				t.Error(err)
			}
			bought.Store(true)
		}
		expirer := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now,
			UnsafeExpiry: seckill.ExpiryUnlocked, ExpiryChaos: between})
		if n, err := expirer.ExpireDue(ctx); err != nil || n != 1 || !bought.Load() {
			t.Fatalf("ExpireDue: %d, %v; bob bought between: %v", n, err, bought.Load())
		}
		if got := supply(t, st, p.ID); got != 3 {
			t.Errorf("stock + reserved + sold after the unlocked expiry: got %d, want 3, one more than the 2 there are", got)
		}
	})
	t.Run("unchecked expiry", func(t *testing.T) {
		e := newEnv(t)
		st := e.store()
		clk := newClock()
		p := e.product(st, 2)
		svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now, UnsafeExpiry: seckill.ExpiryUnchecked})
		ctx := context.Background()
		o, err := svc.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Pay(ctx, o.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		// bob lets his window pass: the product has an order due.
		if _, err := svc.Purchase(ctx, p.ID, "bob"); err != nil {
			t.Fatal(err)
		}
		clk.set(o.ExpiresAt.Add(time.Millisecond))
		if n, err := svc.ExpireDue(ctx); err != nil || n != 2 {
			t.Fatalf("ExpireDue: %d, %v; want bob's order and alice's paid one expired", n, err)
		}
		if got, _ := st.Order(ctx, o.ID); got.State != seckill.OrderExpired {
			t.Errorf("the paid order after the unchecked expiry: %q, want expired", got.State)
		}
		// Both units on sale again while one is still counted sold:
		// reserved goes below its pending orders (none), sold above its
		// paid ones (none).
		if got, _ := st.Product(ctx, p.ID); got.Stock != 2 || got.Reserved != -1 || got.Sold != 1 {
			t.Errorf("after the unchecked expiry: stock %d, reserved %d, sold %d; want 2, -1 and 1: the paid unit back on sale", got.Stock, got.Reserved, got.Sold)
		}
	})
	t.Run("payment after the expiry", func(t *testing.T) {
		e := newEnv(t)
		st := e.store()
		clk := newClock()
		p := e.product(st, 1)
		svc := seckill.NewService(e.locker(lock.Options{}), st, seckill.Options{PayWindow: time.Second, Now: clk.Now, UnsafePayLate: true})
		ctx := context.Background()
		o, err := svc.Purchase(ctx, p.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		clk.set(o.ExpiresAt)
		if n, err := svc.ExpireDue(ctx); err != nil || n != 1 {
			t.Fatalf("ExpireDue: %d, %v", n, err)
		}
		if _, err := svc.Pay(ctx, o.ID, "alice"); err != nil {
			t.Fatalf("late payment under the control: %v, want it accepted", err)
		}
		if got := supply(t, st, p.ID); got != 2 {
			t.Errorf("stock + reserved + sold after the late payment: got %d, want 2, one more than the 1 there is", got)
		}
	})
}

// racePaysAndExpiry pays every order through payer while expirer expires
// what is due, all at once, then checks that each order ended in the
// state its payment's answer says (paid if it succeeded, else expired),
// and that every order moved once. It returns how many were paid and
// how many expired.
func racePaysAndExpiry(t *testing.T, ctx context.Context, payer, expirer life, orders []*seckill.Order) (nPaid, nExpired int64) {
	t.Helper()
	n := int64(len(orders))
	paid := make([]atomic.Bool, n)
	var expired atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		k, err := expirer.ExpireDue(ctx)
		if err != nil {
			t.Error(err)
		}
		expired.Add(int64(k))
	})
	for i, o := range orders {
		wg.Go(func() {
			_, err := payer.Pay(ctx, o.ID, o.UserID)
			switch {
			case err == nil:
				paid[i].Store(true)
			case !errors.Is(err, seckill.ErrOrderExpired):
				t.Errorf("pay order %d: %v", o.ID, err)
			}
		})
	}
	wg.Wait()
	for i, o := range orders {
		got, _ := payer.Order(ctx, o.ID)
		want := seckill.OrderExpired
		if paid[i].Load() {
			want = seckill.OrderPaid
			nPaid++
		}
		if got.State != want {
			t.Errorf("order %d: %q, want %q (the payment answered %v)", o.ID, got.State, want, paid[i].Load())
		}
	}
	if nPaid+expired.Load() != n {
		t.Errorf("paid %d + expired %d, want %d: each order moved once", nPaid, expired.Load(), n)
	}
	return nPaid, expired.Load()
}
