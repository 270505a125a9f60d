package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// Tx is a transaction on one of a PostgreSQL store's connections that a
// test keeps open, to hold the locks of the store's own statements at a
// moment of its choice. Its methods run the statements the store runs.
type Tx struct {
	conn *sql.Conn
	tx   pgx.Tx
}

// Begin starts a transaction on one of s's connections (PostgreSQL only).
func Begin(s *Store) (*Tx, error) {
	ctx := context.Background()
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var pc *pgx.Conn
	_ = conn.Raw(func(dc any) error { pc = dc.(*stdlib.Conn).Conn(); return nil })
	tx, err := pc.Begin(ctx)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &Tx{conn: conn, tx: tx}, nil
}

// ClaimFence runs ClaimFence's statement in the transaction.
func (t *Tx) ClaimFence(productID, token int64) error {
	tag, err := t.tx.Exec(context.Background(), pgClaim, productID, token)
	if err == nil && tag.RowsAffected() == 0 {
		return seckill.ErrFenceRejected
	}
	return err
}

// PlaceOrders runs PlaceOrders' statement in the transaction.
func (t *Tx) PlaceOrders(productID, token, newStock int64, orders []*seckill.Order) error {
	return pgPlaceOrders(context.Background(), t.tx, productID, token, newStock, orders)
}

// InsertOrder inserts o in the transaction, and nothing else.
func (t *Tx) InsertOrder(o *seckill.Order) error {
	_, err := t.tx.Exec(context.Background(), "INSERT INTO orders (product_id, user_id, fence, created_at) VALUES ($1, $2, $3, $4)",
		o.ProductID, o.UserID, o.Fence, o.CreatedAt)
	return err
}

// Commit commits the transaction.
func (t *Tx) Commit() error {
	defer t.conn.Close()
	return t.tx.Commit(context.Background())
}

// Rollback rolls the transaction back, unless it has ended.
func (t *Tx) Rollback() error {
	defer t.conn.Close()
	return t.tx.Rollback(context.Background())
}

// MaxOpenConns is the size of s's connection pool.
func MaxOpenConns(s *Store) int {
	sqlDB, _ := s.db.DB()
	return sqlDB.Stats().MaxOpenConnections
}

// DefaultIsolation is the default_transaction_isolation of s's
// connections (PostgreSQL only).
func DefaultIsolation(s *Store) (string, error) {
	var level string
	err := s.db.Raw("SHOW default_transaction_isolation").Scan(&level).Error
	return level, err
}

// Lookup is a statement that looks a buyer's orders up, with arguments
// for a product and its users.
type Lookup struct {
	Name string
	SQL  string
	Args func(productID int64, users []string) []any
}

// BuyerLookups are the statements with which the store asks PostgreSQL
// whether buyers have an order, as the server gets them.
var BuyerLookups = []Lookup{
	{"ProductAndBuyers", pgProductAndBuyers, func(id int64, users []string) []any { return []any{id, users} }},
	{"ProductsAndBuyers, ClaimAndReadAll's read", pgProductsAndBuyers, func(id int64, users []string) []any {
		ids := make([]int64, len(users))
		for i := range ids {
			ids[i] = id
		}
		return []any{ids, users, []int64{id}}
	}},
	{"ClaimAndRead's buyers", pgBuyers, func(id int64, users []string) []any { return []any{id, users} }},
	{"HasOrder", numbered(hasOrderSQL), func(id int64, users []string) []any { return []any{id, users[0]} }},
}

// SQLiteProductsAndBuyers is the statement with which the store reads
// products (a JSON array of ids) and asks SQLite whether the buyers of
// (product, user) pairs (a JSON array) have an order.
const SQLiteProductsAndBuyers = sqliteProductsAndBuyers

// numbered replaces the ? placeholders of query by $1, $2, ..., as GORM
// does for PostgreSQL.
func numbered(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// HoldGate takes s's write gate, as one of its writers would, until the
// returned function is called. It reports false for a store with no gate.
func HoldGate(s *Store) (release func(), ok bool) {
	if s.gate == nil {
		return nil, false
	}
	_ = s.gate.enter(context.Background())
	return s.gate.leave, true
}

// SeveralProducts runs the PostgreSQL statements of several products
// (ClaimAndReadAll's, PlaceOrdersAll's, ProductsAndBuyers'), which the
// store's calls skip when they are given one product.
type SeveralProducts struct{ p pgxPath }

// Several returns s's statements of several products (PostgreSQL only).
func Several(s *Store) SeveralProducts { return SeveralProducts{s.path.(pgxPath)} }

func (x SeveralProducts) ClaimAndReadAll(ctx context.Context, claims []seckill.Claim) (out []seckill.Claimed, err error) {
	err = x.p.conn(ctx, func(c *pgx.Conn) error {
		out, err = pgClaimAndReadAll(ctx, c, claims)
		return err
	})
	return out, err
}

func (x SeveralProducts) PlaceOrdersAll(ctx context.Context, ps []seckill.Placement) (refused []error, err error) {
	err = x.p.conn(ctx, func(c *pgx.Conn) error {
		refused, err = pgPlaceOrdersAll(ctx, c, ps)
		return err
	})
	return refused, err
}

func (x SeveralProducts) ProductsAndBuyers(ctx context.Context, want []seckill.BuyersOf) (products map[int64]*seckill.Product, bought map[int64]map[string]bool, err error) {
	err = x.p.conn(ctx, func(c *pgx.Conn) error {
		products, bought, err = pgProductsAndBuyersAll(ctx, c, want)
		return err
	})
	return products, bought, err
}

// Plans reports how many generic and custom plans PostgreSQL has made for
// the statements s prepared whose text contains part, on the connection
// that answers (one, with pool_max_conns=1).
func Plans(s *Store, part string) (generic, custom int64, err error) {
	err = s.db.Raw("SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements WHERE statement LIKE '%' || ? || '%'", part).Row().Scan(&generic, &custom)
	return generic, custom, err
}
