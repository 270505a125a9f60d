package store_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// TestMain stops the PostgreSQL server that the tests start on first use.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t testing.TB, db string) *store.Store {
	t.Helper()
	s, err := store.Open(db)
	if err != nil {
		t.Fatalf("Open(%q): %v", db, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func newProduct(t *testing.T, s *store.Store, stock int64) *seckill.Product {
	t.Helper()
	p := &seckill.Product{Name: "phone", Stock: stock}
	if err := s.CreateProduct(context.Background(), p); err != nil {
		t.Fatalf("CreateProduct: %v", err)
	}
	return p
}

// rawDB opens db with database/sql, beside the store, for statements no
// store method makes. It is closed when the test ends.
func rawDB(t testing.TB, db string) *sql.DB {
	t.Helper()
	driver, dsn := "sqlite3", db+"?_busy_timeout=5000"
	if store.IsPostgres(db) {
		driver, dsn = "pgx", db
	}
	raw, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// fillOrders inserts n orders of users fill-1..fill-n for product id with
// one SQL statement, straight into the database (no store method sells
// them, and sold is left as it is).
func fillOrders(t testing.TB, db string, productID int64, n int) {
	t.Helper()
	query := `WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO orders (product_id, user_id, fence, created_at)
		SELECT ?, 'fill-' || i, 0, ? FROM seq`
	args := []any{n, productID, time.Now().UTC()}
	if store.IsPostgres(db) {
		query = `INSERT INTO orders (product_id, user_id, fence, created_at)
			SELECT $1, 'fill-' || i, 0, $2 FROM generate_series(1, $3::int) AS i`
		args = []any{productID, time.Now().UTC(), n}
	}
	if _, err := rawDB(t, db).Exec(query, args...); err != nil {
		t.Fatalf("fill %d orders: %v", n, err)
	}
}

// allOrders lists every order of the product, oldest first.
func allOrders(t *testing.T, s *store.Store, productID int64) []*seckill.Order {
	t.Helper()
	var all []*seckill.Order
	q := seckill.OrderQuery{Limit: seckill.MaxOrderLimit, Cursor: true}
	for {
		page, err := s.Orders(context.Background(), productID, q)
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
