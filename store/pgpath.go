package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// pgxPath is the purchase's statements on PostgreSQL, sent through pgx on
// the connections of the store's pool. Every statement is a round trip to
// the server, and a lock hold lasts as long as its round trips, so each
// step is one:
//
//   - the fast path's read: the product and the buyers' orders in one
//     statement (pgProductAndBuyers);
//   - the claim and the reads under the lock: three statements sent
//     together (pgx.Batch), which the server runs one after the other
//     (pgClaim, pgProduct, pgBuyers; see below);
//   - the fenced write: the product update and the inserts in one statement
//     (pgPlace), a transaction of its own.
//
// # The fast path's read
//
// Most requests of a sale come after the stock is gone, and the fast
// path's read alone answers them; package seckill shares one read among
// the buyers of a product waiting for one. It is one statement: one round
// trip, and one snapshot, so the product and the buyers' orders are of
// the same moment. A sold-out mark kept elsewhere (in Redis, say) would
// not spare the database this read: the rules answer already_purchased
// before sold_out, so a sold-out answer needs the lookup of the buyer's
// order anyway, and the product row comes with it for one more index
// probe. The mark would only add state to keep right: set after the last
// sale, and cleared by a restock before it answers, also against a holder
// whose lease ran out and whose late mark lands after the clear.
//
// # Plans that do not depend on statistics
//
// A new database has no statistics on orders until autovacuum first
// analyzes it, a minute or more into a sale; until then the planner
// guesses from the table's size on disk. Asked for "product_id = $1 AND
// user_id IN (...)", it then scans idx_orders_product_id for the product
// and filters the users: every order of the product, read for every batch,
// so that the cost of a batch grows with the sale (EXPLAIN shows the plan
// from a few hundred orders on; pg_stat_user_indexes shows that index
// reading thousands of entries per scan). An equality on every column of
// the unique (product_id, user_id) index is planned as one row whatever
// the statistics, and so always through that index. pgBuyers therefore
// asks for each user in turn: a LATERAL subquery with LIMIT 1 cannot be
// flattened into a join, so its only plan is a nested loop over the
// buyers with one probe of the unique index each, as many probes as
// buyers however many orders the product has.
// TestPostgresPlansUseTheBuyerIndex checks the plan of every per-buyer
// lookup on a table without statistics, at several sizes, custom and
// generic.
//
// # The claim and the reads in one round trip
//
// The fence's argument (package doc, property 3) needs the reads to start
// after the claim has finished, so that they see every write the claim
// waited for. One statement with the claim in a CTE would not do: all of a
// statement reads from one snapshot, taken before the claim waited. A
// batch keeps them separate statements: the server runs each to its end
// before it starts the next, and under READ COMMITTED each statement gets
// a snapshot of its own, taken when it starts. The three run in one
// transaction (the protocol's implicit one, up to the Sync that ends the
// batch), so the claim's row lock is held during the two reads, which
// take no lock, and released by the commit before the results come back:
// nothing stays open that could block the holder's own write, as with the
// claim on its own (property 1).
//
// # The write in one statement
//
// pgPlace updates the product in a CTE, only WHERE fence = token, and
// inserts the orders from that CTE's result: if the fence moved on, the
// CTE returns no row and nothing is inserted; the statement returns the
// orders it inserted, so none means refused. The statement is its own
// transaction, so the properties of the two-statement transaction hold: an
// update that waits for a newer claim's row lock evaluates the fence again
// on the newest row and matches nothing (property 2); once it has matched,
// the row stays locked until the statement commits, inserts included; and
// a duplicate order fails the whole statement, product update and all.
type pgxPath struct{ db *sql.DB }

// The statements of pgxPath. pgClaim, pgPlace and the product update of
// pgPlace carry the same conditions as claimFence and placeFenced.
const (
	pgClaim = "UPDATE products SET fence = $2 WHERE id = $1 AND fence < $2"

	pgProduct = "SELECT id, name, stock, reserved, sold, fence FROM products WHERE id = $1"

	pgBuyers = `SELECT u.user_id FROM unnest($2::text[]) AS u(user_id)
	CROSS JOIN LATERAL (SELECT 1 FROM orders WHERE product_id = $1 AND user_id = u.user_id AND ` + liveState + ` LIMIT 1) AS o`

	pgProductAndBuyers = `SELECT id, name, stock, reserved, sold, fence, ARRAY(` + pgBuyers + `)
	FROM products WHERE id = $1`

	pgPlace = `WITH product AS (
		UPDATE products SET stock = $3, sold = sold + $9, reserved = reserved + $10
		WHERE id = $1 AND fence = $2
		RETURNING id
	)
	INSERT INTO orders (product_id, user_id, fence, created_at, state, expires_at)
	SELECT product.id, o.user_id, o.fence, o.created_at, o.state, o.expires_at
	FROM product, unnest($4::text[], $5::bigint[], $6::timestamptz[], $7::text[], $8::timestamptz[]) WITH ORDINALITY AS o(user_id, fence, created_at, state, expires_at, n)
	ORDER BY o.n
	RETURNING id, user_id`
)

// pgxQuerier is what the statements need of a connection: *pgx.Conn, or a
// pgx.Tx in the tests that hold a transaction open.
type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// conn runs fn on a connection of the pool, as pgx sees it.
func (p pgxPath) conn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	c, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error { return fn(dc.(*stdlib.Conn).Conn()) })
}

func (p pgxPath) productAndBuyers(ctx context.Context, productID int64, userIDs []string) (pr *seckill.Product, bought map[string]bool, err error) {
	var found []string
	err = p.conn(ctx, func(c *pgx.Conn) error {
		pr, err = scanProduct(c.QueryRow(ctx, pgProductAndBuyers, productID, userIDs), &found)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: product %d and buyers among %d users: %w", productID, len(userIDs), err)
	}
	return pr, boughtSet(found), nil
}

func (p pgxPath) buyers(ctx context.Context, productID int64, userIDs []string) (bought map[string]bool, err error) {
	err = p.conn(ctx, func(c *pgx.Conn) error {
		bought, err = pgBuyersOf(ctx, c, productID, userIDs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: buyers among %d users of product %d: %w", len(userIDs), productID, err)
	}
	return bought, nil
}

func pgBuyersOf(ctx context.Context, q pgxQuerier, productID int64, userIDs []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, pgBuyers, productID, userIDs)
	if err != nil {
		return nil, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return boughtSet(found), nil
}

func (p pgxPath) claimAndRead(ctx context.Context, productID, token int64, userIDs []string) (pr *seckill.Product, bought map[string]bool, err error) {
	err = p.conn(ctx, func(c *pgx.Conn) error {
		pr, bought, err = pgClaimAndRead(ctx, c, productID, token, userIDs)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: claim fence %d of product %d and read it: %w", token, productID, err)
	}
	return pr, bought, nil
}

// pgClaimAndRead sends the claim and the two reads in one batch and reads
// their results in order.
func pgClaimAndRead(ctx context.Context, q pgxQuerier, productID, token int64, userIDs []string) (p *seckill.Product, bought map[string]bool, err error) {
	b := &pgx.Batch{}
	b.Queue(pgClaim, productID, token)
	b.Queue(pgProduct, productID)
	b.Queue(pgBuyers, productID, userIDs)
	br := q.SendBatch(ctx, b)
	defer func() {
		// Close reads what is left unread, and reports the batch's error.
		if cerr := br.Close(); err == nil && cerr != nil {
			p, bought, err = nil, nil, cerr
		}
	}()
	tag, err := br.Exec()
	if err != nil {
		return nil, nil, err
	}
	if tag.RowsAffected() == 0 {
		return nil, nil, seckill.ErrFenceRejected
	}
	if p, err = scanProduct(br.QueryRow()); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, err
	}
	return p, boughtSet(found), nil
}

func (p pgxPath) placeOrders(ctx context.Context, productID, token, newStock int64, orders []*seckill.Order) error {
	if len(orders) == 0 {
		return errNoOrders
	}
	err := p.conn(ctx, func(c *pgx.Conn) error {
		return pgPlaceOrders(ctx, c, productID, token, newStock, orders)
	})
	if err != nil {
		return fmt.Errorf("store: place %d order(s) for product %d under fence %d, the first of user %q: %w", len(orders), productID, token, orders[0].UserID, err)
	}
	return nil
}

// pgPlaceOrders runs pgPlace and sets the orders' ids from what it
// returns: none means the fence refused the write.
func pgPlaceOrders(ctx context.Context, q pgxQuerier, productID, token, newStock int64, orders []*seckill.Order) error {
	users := make([]string, len(orders))
	fences := make([]int64, len(orders))
	created := make([]time.Time, len(orders))
	states := make([]string, len(orders))
	expires := make([]*time.Time, len(orders))
	for i, o := range orders {
		users[i], fences[i], created[i] = o.UserID, o.Fence, o.CreatedAt
		states[i], expires[i] = string(orderState(o)), expiresAt(o)
	}
	sold, reserved := placed(orders)
	rows, err := q.Query(ctx, pgPlace, productID, token, newStock, users, fences, created, states, expires, sold, reserved)
	if err != nil {
		return err
	}
	ids := make(map[string]int64, len(orders))
	var id int64
	var user string
	_, err = pgx.ForEachRow(rows, []any{&id, &user}, func() error {
		ids[user] = id
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %w", seckill.ErrAlreadyPurchased, err)
	}
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return seckill.ErrFenceRejected
	}
	for _, o := range orders {
		o.ID = ids[o.UserID]
	}
	return nil
}

// scanProduct reads a row of pgProduct, or of pgProductAndBuyers with
// the column after the product's into more; no row is ErrNotFound.
func scanProduct(row pgx.Row, more ...any) (*seckill.Product, error) {
	var p seckill.Product
	if err := row.Scan(append([]any{&p.ID, &p.Name, &p.Stock, &p.Reserved, &p.Sold, &p.Fence}, more...)...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = seckill.ErrNotFound
		}
		return nil, err
	}
	return &p, nil
}

// pgWriteOrders inserts the orders of one array each per column: one
// statement whatever their number, planned once per connection, where an
// INSERT with a row of parameters per order is a new statement for every
// batch size.
const pgWriteOrders = `INSERT INTO orders (product_id, user_id, fence, created_at)
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[])
	ON CONFLICT DO NOTHING`

func (p pgxPath) writeOrders(ctx context.Context, orders []*seckill.Order) (n int, err error) {
	products := make([]int64, len(orders))
	users := make([]string, len(orders))
	fences := make([]int64, len(orders))
	created := make([]time.Time, len(orders))
	for i, o := range orders {
		products[i], users[i], fences[i], created[i] = o.ProductID, o.UserID, o.Fence, o.CreatedAt
	}
	err = p.conn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, pgWriteOrders, products, users, fences, created)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
