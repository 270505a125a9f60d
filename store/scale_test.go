package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// Paging with the cursor returns every order exactly once, in id order,
// also while orders are being added between the pages.
func TestOrdersCursorSeesEveryOrderOnce(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 0)
		other := newProduct(t, s, 0)
		const filled = 100_000
		fillOrders(t, db, p.ID, filled)
		fillOrders(t, db, other.ID, 10)

		seen := map[int64]bool{}
		users := map[string]bool{}
		var after, last int64
		added := 0
		for pages := 0; ; pages++ {
			list, err := s.Orders(ctx, p.ID, seckill.OrderQuery{Limit: seckill.MaxOrderLimit, After: after, Cursor: true})
			if err != nil {
				t.Fatal(err)
			}
			if list.Count != nil {
				t.Fatal("a cursor page counted the orders")
			}
			for _, o := range list.Orders {
				if o.ProductID != p.ID || seen[o.ID] || o.ID <= last {
					t.Fatalf("page %d: order %+v: another product's, seen twice, or out of order (last id %d)", pages, o, last)
				}
				seen[o.ID], users[o.UserID], last = true, true, o.ID
			}
			// A buyer arrives between pages: the cursor must still reach it.
			if pages%10 == 0 {
				o := &seckill.Order{ProductID: p.ID, UserID: fmt.Sprintf("late-%d", pages), CreatedAt: time.Now()}
				if err := s.InsertOrder(ctx, o); err != nil {
					t.Fatal(err)
				}
				added++
			}
			if list.Next == 0 {
				break
			}
			if list.Next != last {
				t.Fatalf("next: got %d, want the page's last id %d", list.Next, last)
			}
			after = list.Next
		}
		// The last page's own insert may come after the cursor passed: read it.
		list, err := s.Orders(ctx, p.ID, seckill.OrderQuery{Limit: seckill.MaxOrderLimit, After: last, Cursor: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Orders {
			if seen[o.ID] {
				t.Fatalf("order %d seen twice", o.ID)
			}
			seen[o.ID], users[o.UserID] = true, true
		}
		if len(seen) != filled+added || len(users) != filled+added {
			t.Fatalf("got %d orders of %d users, want %d", len(seen), len(users), filled+added)
		}
	})
}

// The tables as a database written before products had a sold column:
// sold was then counted from the orders on every read.
type (
	oldProduct struct {
		ID        int64     `gorm:"primaryKey"`
		Name      string    `gorm:"not null"`
		Stock     int64     `gorm:"not null"`
		Fence     int64     `gorm:"not null;default:0"`
		CreatedAt time.Time `gorm:"not null"`
	}
	oldOrder struct {
		ID        int64     `gorm:"primaryKey"`
		ProductID int64     `gorm:"not null;uniqueIndex:idx_orders_product_user,priority:1"`
		UserID    string    `gorm:"not null;size:64;uniqueIndex:idx_orders_product_user,priority:2"`
		Fence     int64     `gorm:"not null;default:0"`
		CreatedAt time.Time `gorm:"not null"`
	}
)

func (oldProduct) TableName() string { return "products" }
func (oldOrder) TableName() string   { return "orders" }

// writeOldDatabase creates, in the empty database db, the old tables and
// the products a (stock 7, fence 5), b and c, with GORM from the old
// structs, as the service of that time did.
func writeOldDatabase(t *testing.T, db string) {
	t.Helper()
	dialector := sqlite.Open(db)
	if store.IsPostgres(db) {
		dialector = postgres.Open(db)
	}
	gdb, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := gdb.AutoMigrate(&oldProduct{}, &oldOrder{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	products := []oldProduct{{Name: "a", Stock: 7, Fence: 5, CreatedAt: now}, {Name: "b", CreatedAt: now}, {Name: "c", Stock: 3, CreatedAt: now}}
	if err := gdb.Create(&products).Error; err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := gdb.DB()
	if err := sqlDB.Close(); err != nil {
		t.Fatal(err)
	}
}

// Opening a database of the old schema adds sold and fills it from the
// orders, once, also when several replicas open it at the same moment.
func TestMigrateFillsSoldFromOrders(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		writeOldDatabase(t, db)
		fillOrders(t, db, 1, 3)
		fillOrders(t, db, 2, 1200)

		stores := make([]*store.Store, 4)
		errs := make(chan error, len(stores))
		for i := range stores {
			go func() {
				var err error
				stores[i], err = store.Open(db)
				errs <- err
			}()
		}
		for range stores {
			if err := <-errs; err != nil {
				t.Fatalf("Open: %v", err)
			}
		}
		for _, s := range stores {
			t.Cleanup(func() { _ = s.Close() })
		}
		ctx := context.Background()
		// A replica that migrated first and sold meanwhile must not have its
		// count reset by one that migrates after it: sell one now and reopen.
		if err := stores[0].InsertOrder(ctx, &seckill.Order{ProductID: 3, UserID: "new", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		again := open(t, db)
		for id, want := range map[int64]int64{1: 3, 2: 1200, 3: 1} {
			p, err := again.Product(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if p.Sold != want {
				t.Errorf("product %d: sold %d, want %d", id, p.Sold, want)
			}
		}
		if p, _ := again.Product(ctx, 1); p.Stock != 7 || p.Fence != 5 {
			t.Errorf("product 1: got %+v, want stock 7 and fence 5 kept", p)
		}
	})
}

// An unfenced write-back that oversells shows in sold: every insert counts,
// while the stock written back is the stale value read before.
func TestUnfencedOversellShowsInSold(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 1)
		// Two buyers both read stock 1, both insert, both write back 0.
		for _, u := range []string{"a", "b"} {
			if err := s.InsertOrder(ctx, &seckill.Order{ProductID: p.ID, UserID: u, CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if err := s.SetStock(ctx, p.ID, 0); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Product(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Sold != 2 || got.Stock+got.Sold == 1 {
			t.Errorf("got stock %d sold %d, want sold 2 > supply 1, so stock + sold != 1", got.Stock, got.Sold)
		}
	})
}

// PlaceOrders writes a whole batch, or, under a moved fence, nothing.
func TestPlaceOrdersBatch(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 10)
		if err := s.ClaimFence(ctx, p.ID, 7); err != nil {
			t.Fatal(err)
		}
		batch := func(users ...string) []*seckill.Order {
			var out []*seckill.Order
			for _, u := range users {
				out = append(out, &seckill.Order{ProductID: p.ID, UserID: u, Fence: 7, CreatedAt: time.Now()})
			}
			return out
		}
		orders := batch("a", "b", "c")
		if err := s.PlaceOrders(ctx, p.ID, 7, 7, orders); err != nil {
			t.Fatal(err)
		}
		for i, o := range orders {
			if o.ID == 0 || (i > 0 && o.ID <= orders[i-1].ID) {
				t.Fatalf("order ids %d, %d, %d: want increasing ids set", orders[0].ID, orders[1].ID, orders[2].ID)
			}
		}
		// A repeat buyer inside a batch fails the whole batch, which writes nothing.
		if err := s.PlaceOrders(ctx, p.ID, 7, 5, batch("d", "a")); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("batch with a repeat buyer: got %v, want ErrAlreadyPurchased", err)
		}
		if err := s.ClaimFence(ctx, p.ID, 8); err != nil {
			t.Fatal(err)
		}
		if err := s.PlaceOrders(ctx, p.ID, 7, 5, batch("e", "f")); !errors.Is(err, seckill.ErrFenceRejected) {
			t.Fatalf("stale batch: got %v, want ErrFenceRejected", err)
		}
		got, _ := s.Product(ctx, p.ID)
		if got.Stock != 7 || got.Sold != 3 {
			t.Errorf("got stock %d sold %d, want 7 and 3", got.Stock, got.Sold)
		}
		bought, err := s.Buyers(ctx, p.ID, []string{"a", "d", "c", "zz"})
		if err != nil {
			t.Fatal(err)
		}
		if len(bought) != 2 || !bought["a"] || !bought["c"] {
			t.Errorf("Buyers: got %v, want a and c", bought)
		}
	})
}
