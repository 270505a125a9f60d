package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgxPath is statements of a purchase on PostgreSQL, sent through pgx on
// the connections of the store's pool.
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
type pgxPath struct{ db *sql.DB }

// pgBuyers is Buyers' statement on PostgreSQL.
const pgBuyers = `SELECT u.user_id FROM unnest($2::text[]) AS u(user_id)
	CROSS JOIN LATERAL (SELECT 1 FROM orders WHERE product_id = $1 AND user_id = u.user_id LIMIT 1) AS o`

// pgxQuerier is what the statements need of a connection.
type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
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
