package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/counter"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/store"
)

// sale is what the tests need of every design.
type sale interface {
	CreateProduct(ctx context.Context, name string, stock int64) (*seckill.Product, error)
	Product(ctx context.Context, id int64) (*seckill.Product, error)
	Restock(ctx context.Context, id, stock int64) (*seckill.Product, error)
	Purchase(ctx context.Context, productID int64, userID string) (*seckill.Order, error)
	ProductsByID(ctx context.Context, ids []int64) ([]*seckill.Product, error)
	Inventory(ctx context.Context, except []int64) (seckill.Inventory, error)
}

// replica is one design built on e's Redis and database with handles of
// its own, as a separate process would have. flush, for the async design,
// writes every queued order; for the others it does nothing.
type replica struct {
	sale
	st    *store.Store
	flush func()
}

// designs are the designs without a lock, by their DESIGN names.
var designs = []string{"conditional", "redis-counter", "redis-counter-async"}

func (e *env) replica(design string, opts seckill.Options) replica {
	e.t.Helper()
	st := e.store()
	ctr := counter.New(e.redis.Client(), st.ID())
	r := replica{st: st, flush: func() {}}
	switch design {
	case "conditional":
		r.sale = seckill.NewConditional(st, opts)
	case "redis-counter":
		r.sale = seckill.NewCounterSale(ctr, st, opts)
	case "redis-counter-async":
		r.sale = seckill.NewAsyncCounterSale(ctr, ctr, st, opts)
		w := seckill.NewOrderWriter(ctr, st, "writer-"+e.t.Name(), opts, seckill.WriterOptions{})
		r.flush = func() {
			e.t.Helper()
			if err := w.Flush(context.Background()); err != nil {
				e.t.Fatal(err)
			}
		}
	default:
		e.t.Fatalf("no design %q", design)
	}
	return r
}

// Each design gives the same answers as the locked one, in the same
// order of checks: an order's owner hears so even once sold out.
func TestDesignAnswers(t *testing.T) {
	for _, design := range designs {
		t.Run(design, func(t *testing.T) {
			e := newEnv(t)
			rec := newCounts()
			r := e.replica(design, seckill.Options{Recorder: rec})
			ctx := context.Background()
			p, err := r.CreateProduct(ctx, "phone", 1)
			if err != nil {
				t.Fatal(err)
			}
			o, err := r.Purchase(ctx, p.ID, "alice")
			if err != nil || o.ProductID != p.ID || o.UserID != "alice" {
				t.Fatalf("Purchase: got %+v, %v; want alice's order", o, err)
			}
			for _, tt := range []struct {
				id   int64
				user string
				want error
			}{
				{p.ID, "alice", seckill.ErrAlreadyPurchased},
				{p.ID, "bob", seckill.ErrSoldOut},
				{p.ID + 1, "bob", seckill.ErrNotFound},
				{0, "bob", seckill.ErrInvalid},
				{p.ID, "bad user", seckill.ErrInvalid},
			} {
				if _, err := r.Purchase(ctx, tt.id, tt.user); !errors.Is(err, tt.want) {
					t.Errorf("Purchase(%d, %q): got %v, want %v", tt.id, tt.user, err, tt.want)
				}
			}
			r.flush()
			if got, err := r.Product(ctx, p.ID); err != nil || got.Stock != 0 || got.Sold != 1 {
				t.Errorf("Product: got %+v, %v; want stock 0, sold 1", got, err)
			}
			if got := allOrders(t, r.st, p.ID); len(got) != 1 || got[0].UserID != "alice" {
				t.Errorf("orders: got %v, want alice's", got)
			}
			if got, err := r.Restock(ctx, p.ID, 3); err != nil || got.Stock != 3 || got.Sold != 1 || got.Name != "phone" {
				t.Errorf("Restock: got %+v, %v; want stock 3, sold 1", got, err)
			}
			if _, err := r.Restock(ctx, p.ID+1, 3); !errors.Is(err, seckill.ErrNotFound) {
				t.Errorf("Restock of a missing product: got %v, want ErrNotFound", err)
			}
			if _, err := r.Purchase(ctx, p.ID, "bob"); err != nil {
				t.Errorf("bob after the restock: %v", err)
			}
			if rec.outcome(seckill.OutcomeCreated) != 2 || rec.outcome(seckill.OutcomeSoldOut) != 1 {
				t.Errorf("recorded outcomes: got %v, want 2 created and 1 sold out", rec.outcomes)
			}
		})
	}
}

// The dashboard's reads, ProductsByID and Inventory, give each design's
// numbers, as Product does: in the counter designs, the counters', where
// the database's stock and sold are the supply the counters were built
// from and stay as created through the sale.
func TestDesignsReadProductsAsTheySellThem(t *testing.T) {
	for _, design := range designs {
		t.Run(design, func(t *testing.T) {
			e := newEnv(t)
			r := e.replica(design, seckill.Options{})
			ctx := context.Background()
			var ids []int64
			for _, stock := range []int64{3, 1, 2} {
				p, err := r.CreateProduct(ctx, "phone", stock)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, p.ID)
			}
			a, b := ids[0], ids[1]
			for _, id := range []int64{a, b} {
				if _, err := r.Purchase(ctx, id, "alice"); err != nil {
					t.Fatal(err)
				}
			}
			r.flush()
			got, err := r.ProductsByID(ctx, []int64{b, a})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].ID != a || got[0].Stock != 2 || got[0].Sold != 1 || got[1].ID != b || got[1].Stock != 0 || got[1].Sold != 1 {
				var shown []seckill.Product
				for _, p := range got {
					shown = append(shown, *p)
				}
				t.Errorf("ProductsByID: got %+v, want a with stock 2, sold 1, then b with stock 0, sold 1", shown)
			}
			for _, tt := range []struct {
				except []int64
				want   seckill.Inventory
			}{
				{nil, seckill.Inventory{Products: 3, Stock: 4, Sold: 2, SoldOut: 1}},
				{[]int64{a}, seckill.Inventory{Products: 2, Stock: 2, Sold: 1, SoldOut: 1}},
			} {
				if inv, err := r.Inventory(ctx, tt.except); err != nil || inv != tt.want {
					t.Errorf("Inventory(except %v): got %+v, %v; want %+v", tt.except, inv, err, tt.want)
				}
			}
		})
	}
}

// Two replicas of each design, on SQLite and on PostgreSQL, sell exactly
// the stock to buyers racing on both, some of whom try twice: every sale is
// one order, nobody has two, and the product reads stock 0 with sold equal
// to the orders.
func TestDesignsSellExactlyTheStock(t *testing.T) {
	for _, design := range designs {
		t.Run(design, func(t *testing.T) {
			pgtest.EachDB(t, func(t *testing.T, db string) {
				e := newEnvOn(t, db)
				a, b := e.replica(design, seckill.Options{}), e.replica(design, seckill.Options{})
				ctx := context.Background()
				const stock, buyers = 15, 60
				p, err := a.CreateProduct(ctx, "phone", stock)
				if err != nil {
					t.Fatal(err)
				}
				var created atomic.Int64
				errs := make(chan error, 2*buyers)
				var wg sync.WaitGroup
				for i := range 2 * buyers {
					wg.Go(func() {
						r := a
						if i%2 == 1 {
							r = b
						}
						_, err := r.Purchase(ctx, p.ID, fmt.Sprintf("u%d", i%buyers))
						switch {
						case err == nil:
							created.Add(1)
						case !errors.Is(err, seckill.ErrSoldOut) && !errors.Is(err, seckill.ErrAlreadyPurchased):
							errs <- err
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("purchase: %v", err)
				}
				a.flush()
				orders := allOrders(t, a.st, p.ID)
				users := map[string]bool{}
				for _, o := range orders {
					if users[o.UserID] {
						t.Errorf("user %s has two orders", o.UserID)
					}
					users[o.UserID] = true
				}
				got, err := b.Product(ctx, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if created.Load() != stock || len(orders) != stock || got.Stock != 0 || got.Sold != stock {
					t.Errorf("got %d sales, %d orders, product %+v; want %d, %d, stock 0 and sold %d",
						created.Load(), len(orders), got, stock, stock, stock)
				}
			})
		})
	}
}

// counterRecorder is a CounterRecorder that remembers.
type counterRecorder struct {
	built, pending, written, claimed, returning atomic.Int64
}

func (c *counterRecorder) CounterBuilt(int64)   { c.built.Add(1) }
func (c *counterRecorder) OrdersPending(n int)  { c.pending.Add(int64(n)) }
func (c *counterRecorder) OrdersWritten(n int)  { c.written.Add(int64(n)) }
func (c *counterRecorder) OrdersClaimed(n int)  { c.claimed.Add(int64(n)) }
func (c *counterRecorder) UnitsReturning(n int) { c.returning.Add(int64(n)) }

// A Redis that lost the counter gets it back from the database, restocks
// included; a buyer the lost buyer set knew is refused by the orders'
// unique index, and the take is undone.
func TestCounterRebuiltAfterRedisLoss(t *testing.T) {
	e := newEnv(t)
	crec := &counterRecorder{}
	r := e.replica("redis-counter", seckill.Options{Counter: crec})
	ctx := context.Background()
	p, err := r.CreateProduct(ctx, "phone", 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"a", "b", "c"} {
		if _, err := r.Purchase(ctx, p.ID, u); err != nil {
			t.Fatal(err)
		}
	}
	if crec.built.Load() != 1 {
		t.Fatalf("counters built: got %d, want 1 (on first use)", crec.built.Load())
	}
	want := func(step string, stock, sold int64) {
		t.Helper()
		got, err := r.Product(ctx, p.ID)
		if err != nil || got.Stock != stock || got.Sold != sold {
			t.Errorf("%s: got %+v, %v; want stock %d, sold %d", step, got, err, stock, sold)
		}
	}
	e.redis.Restart() // no persistence: every key is gone
	want("after the restart", 2, 3)
	if crec.built.Load() != 2 {
		t.Errorf("counters built: got %d, want 2", crec.built.Load())
	}
	// a's take passes (the buyer set is gone), the insert does not, and
	// the undo gives the item back.
	if _, err := r.Purchase(ctx, p.ID, "a"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Errorf("a again: got %v, want ErrAlreadyPurchased", err)
	}
	want("after a's refused second order", 2, 3)
	if got, err := r.Restock(ctx, p.ID, 4); err != nil || got.Stock != 4 || got.Sold != 3 {
		t.Fatalf("Restock: got %+v, %v", got, err)
	}
	if _, err := r.Purchase(ctx, p.ID, "d"); err != nil {
		t.Fatal(err)
	}
	e.redis.Restart()
	want("after a restart that followed a restock and a sale", 3, 4)
	if crec.pending.Load() != 0 {
		t.Errorf("orders pending after the purchases: got %d, want 0", crec.pending.Load())
	}
}

// failingStore fails AddOrder for one user: a database that refuses an
// insert for a reason of its own.
type failingStore struct {
	*store.Store
	user string
}

var errInsert = errors.New("the insert failed")

func (s failingStore) AddOrder(ctx context.Context, o *seckill.Order) error {
	if o.UserID == s.user {
		return errInsert
	}
	return s.Store.AddOrder(ctx, o)
}

// An insert that fails gives the item back, and the buyer hears of the
// failure, not of a sale.
func TestCounterSaleUndoesAFailedInsert(t *testing.T) {
	e := newEnv(t)
	st := e.store()
	r := seckill.NewCounterSale(counter.New(e.redis.Client(), st.ID()), failingStore{st, "bob"}, seckill.Options{})
	ctx := context.Background()
	p, err := r.CreateProduct(ctx, "phone", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Purchase(ctx, p.ID, "bob"); !errors.Is(err, errInsert) {
		t.Fatalf("bob: got %v, want the insert's error", err)
	}
	if got, _ := r.Product(ctx, p.ID); got.Stock != 2 || got.Sold != 0 {
		t.Errorf("after the failed insert: got stock %d, sold %d; want 2 and 0", got.Stock, got.Sold)
	}
	for _, u := range []string{"a", "c"} {
		if _, err := r.Purchase(ctx, p.ID, u); err != nil {
			t.Errorf("%s: %v (the failed take must not hold an item)", u, err)
		}
	}
}

// What counter.go says a lost counter costs, shown: redis-counter sells
// again the item of a purchase that was between its take and its insert
// when Redis lost the counter, and then that insert lands too.
func TestCounterSaleOversellsWhatWasInFlightAtALoss(t *testing.T) {
	e := newEnv(t)
	taken, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	chaos := func(context.Context, []int64) {
		if first.CompareAndSwap(false, true) { // alice's purchase only
			close(taken)
			<-release
		}
	}
	r := e.replica("redis-counter", seckill.Options{Chaos: chaos})
	ctx := context.Background()
	p, err := r.CreateProduct(ctx, "phone", 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Purchase(ctx, p.ID, "alice")
		done <- err
	}()
	<-taken // alice's item is taken, her order not written
	e.redis.Restart()
	if _, err := r.Purchase(ctx, p.ID, "bob"); err != nil {
		t.Fatalf("bob after the loss: got %v, want a sale (the rebuilt counter does not count alice's)", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("alice: %v", err)
	}
	if got := allOrders(t, r.st, p.ID); len(got) != 2 {
		t.Errorf("orders: got %d, want 2 of a stock of 1", len(got))
	}
}

// The async design answers before the write: the order has no id, the
// orders list does not show it, and the writer's flush writes it.
func TestAsyncCounterSaleAnswersBeforeTheWrite(t *testing.T) {
	e := newEnv(t)
	r := e.replica("redis-counter-async", seckill.Options{})
	ctx := context.Background()
	p, err := r.CreateProduct(ctx, "phone", 2)
	if err != nil {
		t.Fatal(err)
	}
	o, err := r.Purchase(ctx, p.ID, "alice")
	if err != nil || o.ID != 0 || o.UserID != "alice" {
		t.Fatalf("Purchase: got %+v, %v; want alice's order without an id", o, err)
	}
	if got := allOrders(t, r.st, p.ID); len(got) != 0 {
		t.Errorf("orders before the writer ran: got %v, want none", got)
	}
	if got, _ := r.Product(ctx, p.ID); got.Stock != 1 || got.Sold != 1 {
		t.Errorf("product: got stock %d, sold %d; want 1 and 1 (the counter's)", got.Stock, got.Sold)
	}
	r.flush()
	if got := allOrders(t, r.st, p.ID); len(got) != 1 || got[0].UserID != "alice" || !got[0].CreatedAt.Equal(o.CreatedAt) {
		t.Errorf("orders after the flush: got %v, want alice's, created %v", got, o.CreatedAt)
	}
}

// A writer that read a batch and stopped before writing it (here: stalled
// in its chaos hook) loses nothing: another writer claims the batch once
// it has been idle, and writes it. When the stalled one wakes and writes
// it too, nothing is written twice.
func TestOrderWriterClaimsAStalledWritersOrders(t *testing.T) {
	e := newEnv(t)
	st := e.store()
	ctr := counter.New(e.redis.Client(), st.ID())
	sale := seckill.NewAsyncCounterSale(ctr, ctr, st, seckill.Options{})
	ctx := context.Background()
	p, err := sale.CreateProduct(ctx, "phone", 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := sale.Purchase(ctx, p.ID, fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	stalled, wake := make(chan struct{}), make(chan struct{})
	recA, recB := &counterRecorder{}, &counterRecorder{}
	a := seckill.NewOrderWriter(ctr, st, "a", seckill.Options{Counter: recA, Chaos: func(context.Context, []int64) {
		close(stalled)
		<-wake
	}}, seckill.WriterOptions{})
	runCtx, stop := context.WithCancel(ctx)
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		a.Run(runCtx)
	}()
	<-stalled
	if recA.pending.Load() != 4 {
		t.Errorf("a's pending orders while stalled: got %d, want 4", recA.pending.Load())
	}
	// b claims only what has been idle ClaimIdle, and looks every
	// ClaimIdle / 2: a short idle makes the batch b's as soon as it is
	// 1 ms old (Redis's unit).
	b := seckill.NewOrderWriter(ctr, st, "b", seckill.Options{Counter: recB}, seckill.WriterOptions{ClaimIdle: time.Millisecond})
	bCtx, stopB := context.WithCancel(ctx)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		b.Run(bCtx)
	}()
	poll.Eventually(t, 30*time.Second, "b writes a's orders", func() bool { return len(allOrders(t, st, p.ID)) == 4 })
	stopB()
	<-bDone
	close(wake)
	stop()
	<-aDone
	if got := allOrders(t, st, p.ID); len(got) != 4 {
		t.Errorf("orders: got %d, want 4", len(got))
	}
	if recB.claimed.Load() != 4 || recB.written.Load() != 4 || recA.written.Load() != 0 {
		t.Errorf("b claimed %d and wrote %d, a wrote %d; want 4, 4 and 0 (a's write finds them written)",
			recB.claimed.Load(), recB.written.Load(), recA.written.Load())
	}
	if n, err := ctr.QueueLength(ctx); err != nil || n != 0 {
		t.Errorf("queue length: got %d, %v; want 0", n, err)
	}
}

// What counter.go says a lost queue costs, shown: redis-counter-async
// loses the orders still queued when Redis loses its data, and the
// rebuilt counter sells their items again.
func TestAsyncCounterSaleLosesTheQueueWithRedis(t *testing.T) {
	e := newEnv(t)
	r := e.replica("redis-counter-async", seckill.Options{})
	ctx := context.Background()
	p, err := r.CreateProduct(ctx, "phone", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"a", "b"} {
		if _, err := r.Purchase(ctx, p.ID, u); err != nil {
			t.Fatal(err)
		}
	}
	e.redis.Restart() // before any writer ran
	for _, u := range []string{"c", "d"} {
		if _, err := r.Purchase(ctx, p.ID, u); err != nil {
			t.Errorf("%s after the loss: got %v, want a sale", u, err)
		}
	}
	r.flush()
	got := allOrders(t, r.st, p.ID)
	if len(got) != 2 || got[0].UserID != "c" || got[1].UserID != "d" {
		t.Errorf("orders: got %v, want c's and d's only (a's and b's 201s are lost)", got)
	}
}
