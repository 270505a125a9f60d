package store

import (
	"context"
	"fmt"
	"time"

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
// reserveConditionally is the same decision for a pending order: its unit
// is reserved, not sold.
const (
	buyConditionally     = "UPDATE products SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0"
	reserveConditionally = "UPDATE products SET stock = stock - 1, reserved = reserved + 1 WHERE id = ? AND stock > 0"
)

// BuyConditionally sells one item in one transaction: the conditional
// update, then the order's insert. An update that matches no row writes
// nothing and the error says why: the user's order (checked first, as
// the purchase rule has it), a missing product, or no stock. A second
// live order of the user fails the insert on the unique index, and the
// rollback undoes the decrement. A pending order reserves its unit, any
// other sells it. It sets o.ID.
func (s *Store) BuyConditionally(ctx context.Context, o *seckill.Order) error {
	decide := buyConditionally
	if orderState(o) == seckill.OrderPending {
		decide = reserveConditionally
	}
	return s.transaction(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(decide, o.ProductID)
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

// CancelConditionally moves a pending order of userID to cancelled, and
// its unit from the product's reserved count back to its stock, in one
// transaction, with no fence: the unit is added to the stock, never
// written as a value read, so the row's lock is all it needs. The
// product's row is locked first, then the order moves only if it is still
// pending and on time; otherwise nothing changed, and the error says why,
// as PayOrders'.
func (s *Store) CancelConditionally(ctx context.Context, id int64, userID string, now time.Time) (*seckill.Order, error) {
	return s.move(ctx, id, userID, now, seckill.OrderCancelled, func(tx *gorm.DB, o *seckill.Order) error {
		return tx.Exec("UPDATE products SET stock = stock + 1, reserved = reserved - 1 WHERE id = ?", o.ProductID).Error
	})
}

// ExpireConditionally, in one transaction, moves each product's pending
// orders due by now to expired and their units from its reserved count
// back to its stock, with no fence (see CancelConditionally), and returns
// the ids of each product's expired orders. err is a failure of the whole
// call, which then writes nothing.
func (s *Store) ExpireConditionally(ctx context.Context, productIDs []int64, now time.Time) ([][]int64, error) {
	expired, err := s.expireUnfenced(ctx, productIDs, now, true)
	if err != nil {
		return nil, err
	}
	ids := make([][]int64, len(expired))
	for i, os := range expired {
		for _, o := range os {
			ids[i] = append(ids[i], o.ID)
		}
	}
	return ids, nil
}
