package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// The statements of several products at once: the shared read of the
// buyers of any products, and the group commit across products (package
// seckill's commit.go), which claims the fences of every product of a
// round and reads them in one call, and writes all their orders in one
// transaction. Each product keeps the conditions of its own statements
// (fence.go): a claim only above the fence, a write only while the fence
// holds the writer's token. What one product's fence refuses is that
// product's alone.
//
// Two transactions that lock the same rows in different orders can
// deadlock on PostgreSQL. Two holders of one product's lock at once (one
// whose lease ran out) is what the fence is for, so two rounds can meet on
// the same rows: every statement here that locks several rows locks them
// in the order of their ids.

// ProductsAndBuyers reads the products of want and, for each, which of
// its users have an order for it: ProductAndBuyers for several products,
// in one round trip. A product that does not exist is missing from
// products. The products and the buyers are read at one moment (one
// statement).
func (s *Store) ProductsAndBuyers(ctx context.Context, want []seckill.BuyersOf) (map[int64]*seckill.Product, map[int64]map[string]bool, error) {
	return s.path.productsAndBuyers(ctx, want)
}

// ClaimAndReadAll claims each product's fence with its token, as
// ClaimFence does, and then reads the products claimed and, for each,
// which of its users have an order for it, after every claim: the claims
// and the reads of a round of the group commit, in one transaction on
// SQLite and one round trip on PostgreSQL. A refused claim (a token not
// above the product's fence) gives that product an error matching
// seckill.ErrFenceRejected and nothing read; err is a failure of the call.
func (s *Store) ClaimAndReadAll(ctx context.Context, claims []seckill.Claim) ([]seckill.Claimed, error) {
	return s.path.claimAndReadAll(ctx, claims)
}

// PlaceOrdersAll writes each placement, as PlaceOrders does, all in one
// transaction: the product's stock and sold, only while its fence holds
// the placement's token, then its orders, only if that write matched. A
// product whose fence moved on writes nothing and gets an error matching
// seckill.ErrFenceRejected in refused; the others are written. It sets the
// orders' ids.
//
// A duplicate order (the unique index: another writer of the database
// inserted an order of one of the buyers since the round read them) fails
// the one transaction as a whole; the placements are then written again,
// each in a transaction of its own, so that the product with the duplicate
// writes nothing and gets an error matching seckill.ErrAlreadyPurchased in
// refused, and the others are written all the same. Any failure of those
// per-product transactions is that product's, in refused. err is a failure
// of the call, which then writes nothing.
func (s *Store) PlaceOrdersAll(ctx context.Context, ps []seckill.Placement) (refused []error, err error) {
	for _, p := range ps {
		if len(p.Orders) == 0 {
			return nil, errNoOrders
		}
	}
	refused, err = s.path.placeOrdersAll(ctx, ps)
	switch {
	case !errors.Is(err, seckill.ErrAlreadyPurchased):
		return refused, err
	case len(ps) == 1:
		return []error{err}, nil
	}
	refused = make([]error, len(ps))
	for i, p := range ps {
		refused[i] = s.PlaceOrders(ctx, p.ProductID, p.Token, p.NewStock, p.Orders)
	}
	return refused, nil
}

// byProductID returns the indices of items sorted by their product ids.
func byProductID[T any](items []T, id func(T) int64) []int {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(id(items[a]), id(items[b])) })
	return order
}

// pairs flattens want into parallel slices of product ids and users.
func pairs(want []seckill.BuyersOf) (ids []int64, users []string) {
	for _, w := range want {
		for _, u := range w.UserIDs {
			ids = append(ids, w.ProductID)
			users = append(users, u)
		}
	}
	return ids, users
}

// productIDs lists the distinct product ids of want.
func productIDs(want []seckill.BuyersOf) []int64 {
	ids := make([]int64, 0, len(want))
	for _, w := range want {
		if !slices.Contains(ids, w.ProductID) {
			ids = append(ids, w.ProductID)
		}
	}
	return ids
}

// ---- SQLite ----

// The statements of several products at once on SQLite: each takes its
// rows as one JSON array (json_each), so that its text never changes with
// their number and one prepared statement serves every call. A statement
// whose text grows with its rows is parsed and planned again on every
// call, which costs more than running it. They go through database/sql,
// not GORM: these are the statements of every purchase.
const (
	// sqliteProductsAndBuyers reads products by id (?1: a JSON array of
	// ids), and which (product, user) pairs of ?2 (a JSON array of
	// [product, user]) have a live order, in one statement: one statement
	// is one snapshot of the file. A buyer's order can leave pending
	// (cancelled, expired), so a product and its buyers read in two
	// statements can pair a stock from before such a move with buyers from
	// after it: 0 in stock, and no order of the buyer's, where at no moment
	// were both true. The buyers' rows carry the user (the product's carry
	// NULL there): the pairs as a table joined to orders, each one probe
	// of the (product_id, user_id) index whatever the product has sold. (A
	// row value IN a list of pairs is planned as a scan of that index from
	// end to end.)
	sqliteProductsAndBuyers = `SELECT id, name, stock, reserved, sold, fence, NULL FROM products WHERE id IN (SELECT value FROM json_each(?1))
		UNION ALL
		SELECT o.product_id, '', 0, 0, 0, 0, o.user_id FROM json_each(?2) AS w
		JOIN orders o ON o.product_id = w.value ->> 0 AND o.user_id = w.value ->> 1 AND o.` + liveState + "\n"
	// sqliteInsertOrders inserts the orders of a JSON array of [product,
	// user, fence, created_at, state, expires_at], and returns their ids.
	sqliteInsertOrders = `INSERT INTO orders (product_id, user_id, fence, created_at, state, expires_at)
		SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5 FROM json_each(?) ORDER BY key
		RETURNING id, product_id, user_id`
)

// sqliteStmts are the prepared statements of sqlitePath.
type sqliteStmts struct {
	productsAndBuyers, claim, place, insert *sql.Stmt
}

// prepareSQLite prepares the statements on db.
func prepareSQLite(db *sql.DB) (*sqliteStmts, error) {
	var st sqliteStmts
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&st.productsAndBuyers, sqliteProductsAndBuyers}, {&st.claim, claimFence},
		{&st.place, placeFenced}, {&st.insert, sqliteInsertOrders},
	} {
		var err error
		if *p.stmt, err = db.Prepare(p.sql); err != nil {
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
	}
	return &st, nil
}

// querier is what the statements run on: the database, or a transaction.
type querier interface {
	StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt
}

// dbStmts runs prepared statements outside a transaction.
type dbStmts struct{}

func (dbStmts) StmtContext(_ context.Context, stmt *sql.Stmt) *sql.Stmt { return stmt }

func (g gormPath) productsAndBuyers(ctx context.Context, want []seckill.BuyersOf) (map[int64]*seckill.Product, map[int64]map[string]bool, error) {
	products, bought, err := g.readAll(ctx, dbStmts{}, want)
	if err != nil {
		return nil, nil, fmt.Errorf("store: %d products and their buyers: %w", len(want), err)
	}
	return products, bought, nil
}

// readAll reads the products of want and their buyers through q, in one
// statement (sqliteProductsAndBuyers).
func (g gormPath) readAll(ctx context.Context, q querier, want []seckill.BuyersOf) (map[int64]*seckill.Product, map[int64]map[string]bool, error) {
	ids, err := json.Marshal(productIDs(want))
	if err != nil {
		return nil, nil, err
	}
	pids, users := pairs(want)
	pairs := make([][2]any, len(pids))
	for i := range pids {
		pairs[i] = [2]any{pids[i], users[i]}
	}
	raw, err := json.Marshal(pairs)
	if err != nil {
		return nil, nil, err
	}
	rows, err := q.StmtContext(ctx, g.stmts.productsAndBuyers).QueryContext(ctx, string(ids), string(raw))
	if err != nil {
		return nil, nil, err
	}
	products := make(map[int64]*seckill.Product, len(want))
	bought := make(map[int64]map[string]bool, len(want))
	for rows.Next() {
		var p seckill.Product
		var user sql.NullString
		if err := rows.Scan(&p.ID, &p.Name, &p.Stock, &p.Reserved, &p.Sold, &p.Fence, &user); err != nil {
			_ = rows.Close()
			return nil, nil, err
		}
		if !user.Valid {
			products[p.ID] = &p
			continue
		}
		if bought[p.ID] == nil {
			bought[p.ID] = map[string]bool{}
		}
		bought[p.ID][user.String] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, nil, err
	}
	return products, bought, nil
}

// tx runs fn in one write transaction of the database, its turn come at
// the gate (BEGIN IMMEDIATE: the DSN's _txlock, so it holds the file's
// write lock from its start).
func (g gormPath) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return g.gate.write(ctx, func() error {
		tx, err := g.sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

func (g gormPath) claimAndReadAll(ctx context.Context, claims []seckill.Claim) ([]seckill.Claimed, error) {
	out := make([]seckill.Claimed, len(claims))
	// One transaction: it holds the file's write lock from the claims to
	// the reads, so the reads see every write the claims followed, and
	// nothing else.
	err := g.tx(ctx, func(tx *sql.Tx) error {
		claim := tx.StmtContext(ctx, g.stmts.claim)
		var want []seckill.BuyersOf
		for _, i := range byProductID(claims, func(c seckill.Claim) int64 { return c.ProductID }) {
			c := claims[i]
			res, err := claim.ExecContext(ctx, c.Token, c.ProductID, c.Token)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				out[i].Err = fmt.Errorf("store: claim fence %d of product %d: %w", c.Token, c.ProductID, seckill.ErrFenceRejected)
				continue
			}
			want = append(want, seckill.BuyersOf{ProductID: c.ProductID, UserIDs: c.UserIDs})
		}
		if len(want) == 0 {
			return nil
		}
		products, bought, err := g.readAll(ctx, tx, want)
		if err != nil {
			return err
		}
		return fillClaimed(out, claims, products, bought)
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim the fences of %d products and read them: %w", len(claims), err)
	}
	return out, nil
}

// fillClaimed gives each claim that was not refused what was read of its
// product.
func fillClaimed(out []seckill.Claimed, claims []seckill.Claim, products map[int64]*seckill.Product, bought map[int64]map[string]bool) error {
	for i, c := range claims {
		if out[i].Err != nil {
			continue
		}
		p := products[c.ProductID]
		if p == nil {
			return fmt.Errorf("product %d claimed but not read", c.ProductID)
		}
		pc := *p
		out[i] = seckill.Claimed{Product: &pc, Bought: bought[c.ProductID]}
		if out[i].Bought == nil {
			out[i].Bought = map[string]bool{}
		}
	}
	return nil
}

func (g gormPath) placeOrdersAll(ctx context.Context, ps []seckill.Placement) ([]error, error) {
	refused := make([]error, len(ps))
	err := g.tx(ctx, func(tx *sql.Tx) error {
		place := tx.StmtContext(ctx, g.stmts.place)
		var rows [][6]any
		var orders []*seckill.Order
		for _, i := range byProductID(ps, func(p seckill.Placement) int64 { return p.ProductID }) {
			p := ps[i]
			sold, reserved := placed(p.Orders)
			res, err := place.ExecContext(ctx, p.NewStock, sold, reserved, p.ProductID, p.Token)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				refused[i] = fmt.Errorf("store: place %d order(s) for product %d under fence %d: %w", len(p.Orders), p.ProductID, p.Token, seckill.ErrFenceRejected)
				continue
			}
			for _, o := range p.Orders {
				rows = append(rows, sqliteOrderRow(o))
				orders = append(orders, o)
			}
		}
		if len(rows) == 0 {
			return nil
		}
		return g.insertOrders(ctx, tx, rows, orders)
	})
	if err != nil {
		return nil, fmt.Errorf("store: place the orders of %d products: %w", len(ps), err)
	}
	return refused, nil
}

// sqliteTime is how the SQLite driver writes a time (the first of
// sqlite3.SQLiteTimestampFormats), and so how every created_at is stored:
// the same text for an order written by GORM and one written here.
const sqliteTime = "2006-01-02 15:04:05.999999999-07:00"

// sqliteOrderRow is o as a row of sqliteInsertOrders.
func sqliteOrderRow(o *seckill.Order) [6]any {
	var exp any
	if t := expiresAt(o); t != nil {
		exp = t.Format(sqliteTime)
	}
	return [6]any{o.ProductID, o.UserID, o.Fence, o.CreatedAt.UTC().Format(sqliteTime), string(orderState(o)), exp}
}

// insertOrders inserts the orders, given as rows of sqliteInsertOrders,
// in tx, and sets their ids. A second order of a user for a product
// matches seckill.ErrAlreadyPurchased.
func (g gormPath) insertOrders(ctx context.Context, tx *sql.Tx, rows [][6]any, orders []*seckill.Order) error {
	raw, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	res, err := tx.StmtContext(ctx, g.stmts.insert).QueryContext(ctx, string(raw))
	if err != nil {
		return uniqueViolation(err)
	}
	type key struct {
		product int64
		user    string
	}
	ids := make(map[key]int64, len(orders))
	for res.Next() {
		var id, product int64
		var user string
		if err := res.Scan(&id, &product, &user); err != nil {
			_ = res.Close()
			return err
		}
		ids[key{product, user}] = id
	}
	if err := errors.Join(res.Err(), res.Close()); err != nil {
		return uniqueViolation(err)
	}
	for _, o := range orders {
		o.ID = ids[key{o.ProductID, o.UserID}]
	}
	return nil
}

// uniqueViolation marks a failure of the orders' unique index as
// seckill.ErrAlreadyPurchased.
func uniqueViolation(err error) error {
	if strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return fmt.Errorf("%w: %w", seckill.ErrAlreadyPurchased, err)
	}
	return err
}

// ---- PostgreSQL, through pgx ----

// pgProductsAndBuyers reads products and, with each, the buyers found
// among the (product, user) pairs asked for: one statement, one snapshot.
// Each pair is one probe of the unique (product_id, user_id) index, as in
// pgBuyers.
const pgProductsAndBuyers = `WITH w AS (
		SELECT * FROM unnest($1::bigint[], $2::text[]) AS w(product_id, user_id)
	), found AS (
		SELECT w.product_id, w.user_id FROM w
		CROSS JOIN LATERAL (SELECT 1 FROM orders WHERE product_id = w.product_id AND user_id = w.user_id AND ` + liveState + ` LIMIT 1) AS o
	)
	SELECT p.id, p.name, p.stock, p.reserved, p.sold, p.fence, ARRAY(SELECT f.user_id FROM found f WHERE f.product_id = p.id)
	FROM products p WHERE p.id = ANY($3::bigint[])`

// pgInsertFenced inserts the orders of the products whose fence still
// holds the order's token (each order carries its holder's token): after
// the product updates of the same transaction, a product that matched is
// locked with that fence, and one that did not has moved on for good.
const pgInsertFenced = `INSERT INTO orders (product_id, user_id, fence, created_at, state, expires_at)
	SELECT o.product_id, o.user_id, o.fence, o.created_at, o.state, o.expires_at
	FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[], $6::timestamptz[]) WITH ORDINALITY AS o(product_id, user_id, fence, created_at, state, expires_at, n)
	WHERE EXISTS (SELECT 1 FROM products p WHERE p.id = o.product_id AND p.fence = o.fence)
	ORDER BY o.n
	RETURNING id, product_id, user_id`

// The pgxPath calls of several products take the statements of one
// product (pgpath.go) when there is one: most rounds of one hot product's
// sale are, and PostgreSQL runs those statements in less time (about 50 to
// 100 µs less per call, BenchmarkPostgresOneProduct).

func (p pgxPath) productsAndBuyers(ctx context.Context, want []seckill.BuyersOf) (products map[int64]*seckill.Product, bought map[int64]map[string]bool, err error) {
	if len(want) == 1 {
		pr, b, err := p.productAndBuyers(ctx, want[0].ProductID, want[0].UserIDs)
		if errors.Is(err, seckill.ErrNotFound) {
			return map[int64]*seckill.Product{}, map[int64]map[string]bool{}, nil
		}
		if err != nil {
			return nil, nil, err
		}
		return map[int64]*seckill.Product{pr.ID: pr}, map[int64]map[string]bool{pr.ID: b}, nil
	}
	err = p.conn(ctx, func(c *pgx.Conn) error {
		products, bought, err = pgProductsAndBuyersAll(ctx, c, want)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: %d products and their buyers: %w", len(want), err)
	}
	return products, bought, nil
}

// pgProductsAndBuyersAll runs pgProductsAndBuyers for want on c and reads
// its rows.
func pgProductsAndBuyersAll(ctx context.Context, c *pgx.Conn, want []seckill.BuyersOf) (map[int64]*seckill.Product, map[int64]map[string]bool, error) {
	ids, users := pairs(want)
	rows, err := c.Query(ctx, pgProductsAndBuyers, ids, users, productIDs(want))
	if err != nil {
		return nil, nil, err
	}
	return scanProductsAndBuyers(rows)
}

// scanProductsAndBuyers reads the rows of pgProductsAndBuyers.
func scanProductsAndBuyers(rows pgx.Rows) (map[int64]*seckill.Product, map[int64]map[string]bool, error) {
	products := map[int64]*seckill.Product{}
	bought := map[int64]map[string]bool{}
	var pr seckill.Product
	var found []string
	_, err := pgx.ForEachRow(rows, []any{&pr.ID, &pr.Name, &pr.Stock, &pr.Reserved, &pr.Sold, &pr.Fence, &found}, func() error {
		pc := pr
		products[pr.ID] = &pc
		bought[pr.ID] = boughtSet(found)
		return nil
	})
	return products, bought, err
}

func (p pgxPath) claimAndReadAll(ctx context.Context, claims []seckill.Claim) (out []seckill.Claimed, err error) {
	if len(claims) == 1 {
		c := claims[0]
		pr, b, err := p.claimAndRead(ctx, c.ProductID, c.Token, c.UserIDs)
		if errors.Is(err, seckill.ErrFenceRejected) {
			return []seckill.Claimed{{Err: err}}, nil
		}
		if err != nil {
			return nil, err
		}
		return []seckill.Claimed{{Product: pr, Bought: b}}, nil
	}
	err = p.conn(ctx, func(c *pgx.Conn) error {
		out, err = pgClaimAndReadAll(ctx, c, claims)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim the fences of %d products and read them: %w", len(claims), err)
	}
	return out, nil
}

// pgClaimAndReadAll sends the claims, by product id, and the read of
// every product after them in one batch: one round trip, and one
// transaction (the protocol's implicit one), whose claims' row locks end
// with it. The read is a statement of its own, so its snapshot is taken
// after every claim has run (see pgClaimAndRead).
func pgClaimAndReadAll(ctx context.Context, q pgxQuerier, claims []seckill.Claim) (out []seckill.Claimed, err error) {
	order := byProductID(claims, func(c seckill.Claim) int64 { return c.ProductID })
	want := make([]seckill.BuyersOf, len(claims))
	b := &pgx.Batch{}
	for _, i := range order {
		b.Queue(pgClaim, claims[i].ProductID, claims[i].Token)
	}
	for i, c := range claims {
		want[i] = seckill.BuyersOf{ProductID: c.ProductID, UserIDs: c.UserIDs}
	}
	ids, users := pairs(want)
	b.Queue(pgProductsAndBuyers, ids, users, productIDs(want))
	br := q.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			out, err = nil, cerr
		}
	}()
	out = make([]seckill.Claimed, len(claims))
	for _, i := range order {
		tag, err := br.Exec()
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 0 {
			out[i].Err = fmt.Errorf("store: claim fence %d of product %d: %w", claims[i].Token, claims[i].ProductID, seckill.ErrFenceRejected)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	products, bought, err := scanProductsAndBuyers(rows)
	if err != nil {
		return nil, err
	}
	return out, fillClaimed(out, claims, products, bought)
}

func (p pgxPath) placeOrdersAll(ctx context.Context, ps []seckill.Placement) (refused []error, err error) {
	if len(ps) == 1 {
		err := p.placeOrders(ctx, ps[0].ProductID, ps[0].Token, ps[0].NewStock, ps[0].Orders)
		if errors.Is(err, seckill.ErrFenceRejected) {
			return []error{err}, nil
		}
		if err != nil {
			return nil, err
		}
		return []error{nil}, nil
	}
	err = p.conn(ctx, func(c *pgx.Conn) error {
		refused, err = pgPlaceOrdersAll(ctx, c, ps)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		err = fmt.Errorf("%w: %w", seckill.ErrAlreadyPurchased, err)
	}
	if err != nil {
		return nil, fmt.Errorf("store: place the orders of %d products: %w", len(ps), err)
	}
	return refused, nil
}

// pgPlaceOrdersAll sends the products' fenced updates, by product id, and
// the insert of the orders whose fence held, in one batch: one round trip
// and one transaction, which commits with the batch's end.
func pgPlaceOrdersAll(ctx context.Context, q pgxQuerier, ps []seckill.Placement) (refused []error, err error) {
	order := byProductID(ps, func(p seckill.Placement) int64 { return p.ProductID })
	b := &pgx.Batch{}
	var products, fences []int64
	var users, states []string
	var created []time.Time
	var expires []*time.Time
	for _, i := range order {
		p := ps[i]
		sold, reserved := placed(p.Orders)
		b.Queue(pgPlaceProduct, p.ProductID, p.Token, p.NewStock, sold, reserved)
		for _, o := range p.Orders {
			products, users, fences, created = append(products, p.ProductID), append(users, o.UserID), append(fences, p.Token), append(created, o.CreatedAt)
			states, expires = append(states, string(orderState(o))), append(expires, expiresAt(o))
		}
	}
	b.Queue(pgInsertFenced, products, users, fences, created, states, expires)
	br := q.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			refused, err = nil, cerr
		}
	}()
	refused = make([]error, len(ps))
	for _, i := range order {
		tag, err := br.Exec()
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 0 {
			p := ps[i]
			refused[i] = fmt.Errorf("store: place %d order(s) for product %d under fence %d: %w", len(p.Orders), p.ProductID, p.Token, seckill.ErrFenceRejected)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	type key struct {
		product int64
		user    string
	}
	ids := map[key]int64{}
	var id, product int64
	var user string
	_, err = pgx.ForEachRow(rows, []any{&id, &product, &user}, func() error {
		ids[key{product, user}] = id
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, p := range ps {
		if refused[i] != nil {
			continue
		}
		for _, o := range p.Orders {
			o.ID = ids[key{p.ProductID, o.UserID}]
		}
	}
	return refused, nil
}

// pgPlaceProduct is the product update of a fenced write (placeFenced).
const pgPlaceProduct = "UPDATE products SET stock = $3, sold = sold + $4, reserved = reserved + $5 WHERE id = $1 AND fence = $2"
