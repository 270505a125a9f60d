package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// The fenced statements. A product's fence column holds the largest token
// that has claimed it; a write counts only while the fence still holds the
// writer's token. Their outcome is read from RowsAffected: no row changed
// means the fence had moved on (products are never deleted, and the service
// looks a product up before locking it, so a missing row is not the cause).
const (
	claimFence     = "UPDATE products SET fence = ? WHERE id = ? AND fence < ?"
	setStockFenced = "UPDATE products SET stock = ? WHERE id = ? AND fence = ?"
	placeFenced    = "UPDATE products SET stock = ?, sold = sold + ?, reserved = reserved + ? WHERE id = ? AND fence = ?"
)

// ClaimFence stores token as the product's fence if it is larger than the
// stored one; otherwise it returns an error matching
// seckill.ErrFenceRejected.
func (s *Store) ClaimFence(ctx context.Context, productID, token int64) error {
	n, err := s.exec(ctx, claimFence, token, productID, token)
	if err != nil {
		return fmt.Errorf("store: claim fence %d of product %d: %w", token, productID, err)
	}
	if n == 0 {
		return fmt.Errorf("store: claim fence %d of product %d: %w", token, productID, seckill.ErrFenceRejected)
	}
	return nil
}

// ClaimAndRead claims the fence as ClaimFence does, and then reads the
// product and which of userIDs have an order for it, as Product and Buyers
// do: steps 4 and 5 of a purchase, the reads after the claim. On
// PostgreSQL the three statements go in one round trip (pgpath.go).
func (s *Store) ClaimAndRead(ctx context.Context, productID, token int64, userIDs []string) (*seckill.Product, map[string]bool, error) {
	return s.path.claimAndRead(ctx, productID, token, userIDs)
}

// PlaceOrders, in one transaction, sets the product's stock to newStock,
// adds len(orders) to its sold count and inserts the orders, all only while
// the product's fence equals token; otherwise it writes nothing and returns
// an error matching seckill.ErrFenceRejected. The product write goes first:
// once it has matched, this transaction holds the write lock (SQLite's on
// the file, PostgreSQL's on the row) until commit, so the fence cannot move
// between it and the insert. The stock is guarded by the fence alone, not
// by "stock > 0": the fence is what must prevent an oversell (see package
// seckill). It sets the orders' ids. On PostgreSQL the transaction is one
// statement (pgpath.go).
func (s *Store) PlaceOrders(ctx context.Context, productID, token, newStock int64, orders []*seckill.Order) error {
	return s.path.placeOrders(ctx, productID, token, newStock, orders)
}

// SetStockFenced, in one transaction, sets the product's stock while its
// fence equals token and reads the product back, so the answer is the
// state this write produced and nothing later; otherwise it writes nothing
// and returns an error matching seckill.ErrFenceRejected. Once the update
// has matched, the transaction holds SQLite's write lock until commit, so
// no other write lands between the update and the read.
func (s *Store) SetStockFenced(ctx context.Context, productID, stock, token int64) (*seckill.Product, error) {
	var p *seckill.Product
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(setStockFenced, stock, productID, token)
		if res.Error != nil {
			return fmt.Errorf("store: set stock of product %d under fence %d: %w", productID, token, res.Error)
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("store: set stock of product %d under fence %d: %w", productID, token, seckill.ErrFenceRejected)
		}
		var err error
		p, err = product(tx, productID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// placed counts orders by where their units go: a paid order's to the
// product's sold count, a pending one's to its reserved count.
func placed(orders []*seckill.Order) (sold, reserved int) {
	for _, o := range orders {
		if orderState(o) == seckill.OrderPending {
			reserved++
		} else {
			sold++
		}
	}
	return sold, reserved
}

// orderState is the state an order is written with: its own, or paid for
// an order that names none (an order final at once).
func orderState(o *seckill.Order) seckill.OrderState {
	if o.State == "" {
		return seckill.OrderPaid
	}
	return o.State
}

// expiresAt is an order's window end as written: nil (NULL) for none, else
// in UTC, as every time here is, so that SQLite's text times compare in
// time order.
func expiresAt(o *seckill.Order) *time.Time {
	if o.ExpiresAt.IsZero() {
		return nil
	}
	t := o.ExpiresAt.UTC()
	return &t
}
