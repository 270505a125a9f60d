package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// The conditional update sells exactly the stock to buyers racing from
// two handles (two replicas), and every refusal writes nothing. Without
// the condition every buyer gets an order (checked); with the stock
// checked by a read before the update instead of in its WHERE clause,
// PostgreSQL's concurrent transactions would all pass the check.
func TestBuyConditionallySellsExactlyTheStock(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		ctx := context.Background()
		// Two handles, as two replicas would have.
		a, b := open(t, db), open(t, db)
		p := newProduct(t, a, 7)
		const buyers = 40
		errs := make([]error, buyers)
		var wg sync.WaitGroup
		for i := range buyers {
			wg.Go(func() {
				st := a
				if i%2 == 1 {
					st = b
				}
				errs[i] = st.BuyConditionally(ctx, &seckill.Order{ProductID: p.ID, UserID: fmt.Sprintf("u%d", i), CreatedAt: time.Now().UTC()})
			})
		}
		wg.Wait()
		sold := 0
		for i, err := range errs {
			switch {
			case err == nil:
				sold++
			case !errors.Is(err, seckill.ErrSoldOut):
				t.Errorf("buyer %d: got %v, want nil or ErrSoldOut", i, err)
			}
		}
		got, err := a.Product(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		orders := allOrders(t, a, p.ID)
		if sold != 7 || got.Stock != 0 || got.Sold != 7 || len(orders) != 7 {
			t.Errorf("got %d sold, product %+v, %d orders; want 7 sold, stock 0, sold 7, 7 orders", sold, got, len(orders))
		}
	})
}

func TestBuyConditionallyRefusals(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		ctx := context.Background()
		st := open(t, db)
		p := newProduct(t, st, 2)
		buy := func(productID int64, user string) error {
			return st.BuyConditionally(ctx, &seckill.Order{ProductID: productID, UserID: user, CreatedAt: time.Now().UTC()})
		}
		o := &seckill.Order{ProductID: p.ID, UserID: "alice", CreatedAt: time.Now().UTC()}
		if err := st.BuyConditionally(ctx, o); err != nil || o.ID == 0 {
			t.Fatalf("first purchase: got %v and id %d, want nil and an id", err, o.ID)
		}
		// With stock left, the unique index refuses the second order and the
		// rollback undoes the decrement.
		if err := buy(p.ID, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Errorf("alice again: got %v, want ErrAlreadyPurchased", err)
		}
		if got, _ := st.Product(ctx, p.ID); got.Stock != 1 || got.Sold != 1 {
			t.Errorf("after the refused second order: got stock %d sold %d, want 1 and 1", got.Stock, got.Sold)
		}
		if err := buy(p.ID, "bob"); err != nil {
			t.Fatal(err)
		}
		// Sold out: a buyer is told so, unless she has an order.
		if err := buy(p.ID, "carol"); !errors.Is(err, seckill.ErrSoldOut) {
			t.Errorf("carol: got %v, want ErrSoldOut", err)
		}
		if err := buy(p.ID, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Errorf("alice once sold out: got %v, want ErrAlreadyPurchased", err)
		}
		if err := buy(p.ID+1, "carol"); !errors.Is(err, seckill.ErrNotFound) {
			t.Errorf("missing product: got %v, want ErrNotFound", err)
		}
		if got, _ := st.Product(ctx, p.ID); got.Stock != 0 || got.Sold != 2 || len(allOrders(t, st, p.ID)) != 2 {
			t.Errorf("got stock %d sold %d, want 0 and 2 with 2 orders", got.Stock, got.Sold)
		}
	})
}

func TestRestockAnswersTheStateItWrote(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		ctx := context.Background()
		st := open(t, db)
		p := newProduct(t, st, 1)
		if err := st.BuyConditionally(ctx, &seckill.Order{ProductID: p.ID, UserID: "alice", CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		got, err := st.Restock(ctx, p.ID, 9)
		if err != nil || got.Stock != 9 || got.Sold != 1 || got.Name != "phone" {
			t.Errorf("Restock: got %+v, %v; want stock 9, sold 1", got, err)
		}
		if _, err := st.Restock(ctx, p.ID+1, 9); !errors.Is(err, seckill.ErrNotFound) {
			t.Errorf("restock of a missing product: got %v, want ErrNotFound", err)
		}
	})
}

// Supply counts the live orders, pending and paid apart, and returns the
// recorded supply; a restock's record lands only when its generation is
// newer, whatever the order the records arrive in.
func TestSupplyAndRecordRestock(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		ctx := context.Background()
		st := open(t, db)
		p := newProduct(t, st, 10)
		now := time.Now().UTC()
		for _, o := range []*seckill.Order{
			{UserID: "a"}, {UserID: "b"}, {UserID: "c"},
			{UserID: "d", State: seckill.OrderPending, ExpiresAt: now.Add(time.Hour)},
			// Neither holds a unit: not counted.
			{UserID: "e", State: seckill.OrderCancelled, ExpiresAt: now},
			{UserID: "f", State: seckill.OrderExpired, ExpiresAt: now},
		} {
			o.ProductID, o.CreatedAt = p.ID, now
			if err := st.AddOrder(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.AddOrder(ctx, &seckill.Order{ProductID: p.ID, UserID: "a", CreatedAt: time.Now().UTC()}); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Errorf("AddOrder of a second order: got %v, want ErrAlreadyPurchased", err)
		}
		sup, err := st.Supply(ctx, p.ID)
		if want := (seckill.Supply{Stock: 10, Pending: 1, Paid: 3}); err != nil || sup != want {
			t.Errorf("Supply: got %+v, %v; want %+v (AddOrder writes the order alone)", sup, err, want)
		}
		for _, tt := range []struct {
			c     seckill.Count
			wrote bool
		}{
			{seckill.Count{Stock: 5, Reserved: 1, Sold: 3, Gen: 2}, true},
			{seckill.Count{Stock: 7, Reserved: 1, Sold: 3, Gen: 1}, false}, // older, arriving late
			{seckill.Count{Stock: 4, Reserved: 1, Sold: 3, Gen: 2}, false}, // the same generation again
		} {
			if wrote, err := st.RecordRestock(ctx, p.ID, tt.c); err != nil || wrote != tt.wrote {
				t.Errorf("RecordRestock(%+v): got %v, %v; want %v", tt.c, wrote, err, tt.wrote)
			}
		}
		if sup, err := st.Supply(ctx, p.ID); err != nil || sup != (seckill.Supply{Stock: 5, Reserved: 1, Sold: 3, Gen: 2, Pending: 1, Paid: 3}) {
			t.Errorf("Supply after the records: got %+v, %v; want the generation 2 record", sup, err)
		}
		if _, err := st.Supply(ctx, p.ID+1); !errors.Is(err, seckill.ErrNotFound) {
			t.Errorf("Supply of a missing product: got %v, want ErrNotFound", err)
		}
	})
}

// Writing the same queued orders twice (a writer that died after writing
// and before acknowledging, and the writer that claimed its orders) writes
// each once; an order whose user already has one is skipped too.
func TestWriteOrdersIsIdempotent(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		ctx := context.Background()
		st := open(t, db)
		p, q := newProduct(t, st, 10), newProduct(t, st, 10)
		at := time.Now().UTC()
		batch := []*seckill.Order{
			{ProductID: p.ID, UserID: "a", CreatedAt: at},
			{ProductID: p.ID, UserID: "b", CreatedAt: at},
			{ProductID: q.ID, UserID: "a", CreatedAt: at},
		}
		if n, err := st.WriteOrders(ctx, batch); err != nil || n != 3 {
			t.Fatalf("first write: got %d, %v; want 3", n, err)
		}
		again := append(batch, &seckill.Order{ProductID: p.ID, UserID: "c", CreatedAt: at})
		if n, err := st.WriteOrders(ctx, again); err != nil || n != 1 {
			t.Errorf("second write: got %d, %v; want 1 (only c is new)", n, err)
		}
		if got := len(allOrders(t, st, p.ID)); got != 3 {
			t.Errorf("orders of p: got %d, want 3", got)
		}
		if got := len(allOrders(t, st, q.ID)); got != 1 {
			t.Errorf("orders of q: got %d, want 1", got)
		}
	})
}

// A database keeps its id across opens, and two databases have two.
func TestDatabaseID(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	first := open(t, path).ID()
	if first == "" {
		t.Fatal("empty database id")
	}
	if again := open(t, path).ID(); again != first {
		t.Errorf("reopened: got id %q, want %q", again, first)
	}
	if other := open(t, filepath.Join(dir, "b.db")).ID(); other == first {
		t.Errorf("another database got the same id %q", other)
	}
}

// Replicas opening a new database together agree on its id.
func TestDatabaseIDOfConcurrentOpens(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		ids := make([]string, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() {
				s, err := store.Open(db)
				if err != nil {
					errs[i] = err
					return
				}
				ids[i] = s.ID()
				errs[i] = s.Close()
			})
		}
		wg.Wait()
		for i := range ids {
			if errs[i] != nil || ids[i] != ids[0] || ids[i] == "" {
				t.Errorf("open %d: got id %q, %v; want %q like the first", i, ids[i], errs[i], ids[0])
			}
		}
	})
}
