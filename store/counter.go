package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

var _ seckill.CounterStore = (*Store)(nil)

// In the counter designs a product's stock, reserved and sold columns are
// not written by purchases, payments, cancels or expiries: they hold the
// supply as of the product's creation or its last recorded restock, and
// the orders table holds what was sold and reserved since (package
// seckill, counter.go). A database moved from a counter design back to
// another design needs those columns written back from the counters
// first.

// supplyQuery reads the supply and counts the live orders, pending and
// paid, in one statement, so all of it comes from one snapshot on
// PostgreSQL as on SQLite. Counting is O(live orders) in the product's
// index; it runs only when a counter is built.
const supplyQuery = `SELECT p.stock, p.reserved, p.sold, p.counter_gen,
	COUNT(CASE WHEN o.state = 'pending' THEN 1 END) AS pending,
	COUNT(CASE WHEN o.state = 'paid' THEN 1 END) AS paid
	FROM products p LEFT JOIN orders o ON o.product_id = p.id AND o.` + liveState + `
	WHERE p.id = ? GROUP BY p.id, p.stock, p.reserved, p.sold, p.counter_gen`

// Supply returns what the product's counter is built from, or an error
// matching seckill.ErrNotFound.
func (s *Store) Supply(ctx context.Context, productID int64) (seckill.Supply, error) {
	var rows []struct {
		Stock, Reserved, Sold, CounterGen, Pending, Paid int64
	}
	if err := s.db.WithContext(ctx).Raw(supplyQuery, productID).Scan(&rows).Error; err != nil {
		return seckill.Supply{}, fmt.Errorf("store: supply of product %d: %w", productID, err)
	}
	if len(rows) == 0 {
		return seckill.Supply{}, fmt.Errorf("store: supply of product %d: %w", productID, seckill.ErrNotFound)
	}
	r := rows[0]
	return seckill.Supply{Stock: r.Stock, Reserved: r.Reserved, Sold: r.Sold, Gen: r.CounterGen, Pending: r.Pending, Paid: r.Paid}, nil
}

// RecordRestock writes c as the product's supply if c's generation is
// newer than the one recorded, and reports whether it did.
func (s *Store) RecordRestock(ctx context.Context, productID int64, c seckill.Count) (bool, error) {
	n, err := s.exec(ctx, "UPDATE products SET stock = ?, reserved = ?, sold = ?, counter_gen = ? WHERE id = ? AND counter_gen < ?",
		c.Stock, c.Reserved, c.Sold, c.Gen, productID, c.Gen)
	if err != nil {
		return false, fmt.Errorf("store: record restock %d of product %d: %w", c.Gen, productID, err)
	}
	return n == 1, nil
}

// AddOrder inserts o alone: in the counter designs the counter, not the
// product row, keeps the stock. It sets o.ID.
func (s *Store) AddOrder(ctx context.Context, o *seckill.Order) error {
	return s.gate.write(ctx, func() error {
		return insertOrders(s.db.WithContext(ctx), []*seckill.Order{o})
	})
}

// WriteOrders inserts the orders in one statement that skips any whose
// user already has an order for its product (ON CONFLICT DO NOTHING, on
// the unique index), and returns how many it inserted. The orders' ids
// are not set: which rows were skipped is not reported.
func (s *Store) WriteOrders(ctx context.Context, orders []*seckill.Order) (int, error) {
	if len(orders) == 0 {
		return 0, nil
	}
	n, err := s.path.writeOrders(ctx, orders)
	if err != nil {
		return 0, fmt.Errorf("store: write %d queued order(s): %w", len(orders), err)
	}
	return n, nil
}

// writeOrders on SQLite: one INSERT of every order, its turn come at the
// gate.
func (g gormPath) writeOrders(ctx context.Context, orders []*seckill.Order) (int, error) {
	var q strings.Builder
	q.WriteString("INSERT INTO orders (product_id, user_id, fence, created_at) VALUES ")
	args := make([]any, 0, 4*len(orders))
	for i, o := range orders {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?)")
		args = append(args, o.ProductID, o.UserID, o.Fence, o.CreatedAt)
	}
	q.WriteString(" ON CONFLICT DO NOTHING")
	var n int64
	err := g.gate.write(ctx, func() error {
		res := g.db.WithContext(ctx).Exec(q.String(), args...)
		n = res.RowsAffected
		return res.Error
	})
	return int(n), err
}

// OrdersByID reads the orders ids, by id; an id with no order is left
// out.
func (s *Store) OrdersByID(ctx context.Context, ids []int64) (map[int64]*seckill.Order, error) {
	if len(ids) == 0 {
		return map[int64]*seckill.Order{}, nil
	}
	return ordersByID(s.db.WithContext(ctx), ids)
}

// PayOrderRows is PayOrders with the orders alone: each moves from
// pending to paid as PayOrders moves it, and the products' reserved and
// sold counts, which the counters keep in these designs, are left alone.
func (s *Store) PayOrderRows(ctx context.Context, pays []seckill.Payment, now time.Time) ([]*seckill.Order, []error, error) {
	return s.payOrders(ctx, pays, now, false)
}

// CancelOrderRow is CancelConditionally with the order alone: the
// product's row is locked (the order every move locks rows in) and left
// as it is.
func (s *Store) CancelOrderRow(ctx context.Context, id int64, userID string, now time.Time) (*seckill.Order, error) {
	return s.move(ctx, id, userID, now, seckill.OrderCancelled, func(tx *gorm.DB, o *seckill.Order) error {
		return s.lockProducts(tx, []int64{o.ProductID})
	})
}

// ExpireOrderRows is ExpireConditionally with the orders alone, and
// returns each product's expired orders (their ids and users).
func (s *Store) ExpireOrderRows(ctx context.Context, productIDs []int64, now time.Time) ([][]*seckill.Order, error) {
	return s.expireUnfenced(ctx, productIDs, now, false)
}
