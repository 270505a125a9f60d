package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

var _ seckill.ConditionalStore = (*Store)(nil)

// buyConditionally is the conditional design's decision: the condition is
// evaluated on the row as it is when the update runs. On PostgreSQL an
// update that finds the row locked by another buyer's transaction waits
// for it and then evaluates the condition again on the row that
// transaction committed, so stock > 0 is never judged on a stale value;
// on SQLite the transaction holds the file's write lock from its start.
const buyConditionally = "UPDATE products SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0"

// BuyConditionally sells one item in one transaction: the conditional
// update, then the order's insert. An update that matches no row writes
// nothing and the error says why: the user's order (checked first, as
// the purchase rule has it), a missing product, or no stock. A second
// order of the user fails the insert on the unique index, and the
// rollback undoes the decrement. It sets o.ID.
func (s *Store) BuyConditionally(ctx context.Context, o *seckill.Order) error {
	return s.transaction(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(buyConditionally, o.ProductID)
		if res.Error != nil {
			return fmt.Errorf("store: buy product %d for user %q: %w", o.ProductID, o.UserID, res.Error)
		}
		if res.RowsAffected == 0 {
			bought, err := hasOrder(tx, o.ProductID, o.UserID)
			if err != nil {
				return err
			}
			if bought {
				return fmt.Errorf("store: buy product %d for user %q: %w", o.ProductID, o.UserID, seckill.ErrAlreadyPurchased)
			}
			if _, err := product(tx, o.ProductID); err != nil {
				return err
			}
			return fmt.Errorf("store: buy product %d: %w", o.ProductID, seckill.ErrSoldOut)
		}
		return insertOrders(tx, []*seckill.Order{o})
	})
}

// Restock sets the product's stock and reads it back in one transaction,
// so the answer is the state this write produced: a purchase's update
// waits for the row (or the file) until the commit.
func (s *Store) Restock(ctx context.Context, productID, stock int64) (*seckill.Product, error) {
	var p *seckill.Product
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		res := tx.Exec("UPDATE products SET stock = ? WHERE id = ?", stock, productID)
		if res.Error != nil {
			return fmt.Errorf("store: restock product %d: %w", productID, res.Error)
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("store: restock product %d: %w", productID, seckill.ErrNotFound)
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
