package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

func (r orderRow) order() *seckill.Order {
	// PostgreSQL returns times in the process's time zone; orders are
	// written and shown in UTC.
	o := &seckill.Order{ID: r.ID, ProductID: r.ProductID, UserID: r.UserID, Fence: r.Fence, CreatedAt: r.CreatedAt.UTC(),
		State: seckill.OrderState(r.State)}
	if r.ExpiresAt != nil {
		o.ExpiresAt = r.ExpiresAt.UTC()
	}
	if r.ClosedAt != nil {
		o.ClosedAt = r.ClosedAt.UTC()
	}
	return o
}

// hasOrderSQL is HasOrder's statement. An equality on both columns of the
// unique index, with its condition, is planned through that index whatever
// the statistics (see pgxPath).
const hasOrderSQL = "SELECT EXISTS (SELECT 1 FROM orders WHERE product_id = ? AND user_id = ? AND " + liveState + ")"

// HasOrder reports whether userID already has an order for the product.
func (s *Store) HasOrder(ctx context.Context, productID int64, userID string) (bool, error) {
	return hasOrder(s.db.WithContext(ctx), productID, userID)
}

// hasOrder is HasOrder through db, which may be a transaction.
func hasOrder(db *gorm.DB, productID int64, userID string) (bool, error) {
	var found bool // SQLite answers 0 or 1, PostgreSQL a boolean
	err := db.Raw(hasOrderSQL, productID, userID).Scan(&found).Error
	if err != nil {
		return false, fmt.Errorf("store: order of user %q for product %d: %w", userID, productID, err)
	}
	return found, nil
}

// Buyers returns which of userIDs have an order for the product, with one
// lookup in the (product, user) index per user.
func (s *Store) Buyers(ctx context.Context, productID int64, userIDs []string) (map[string]bool, error) {
	return s.path.buyers(ctx, productID, userIDs)
}

// ProductAndBuyers returns the product, as Product does, and which of
// userIDs have an order for it, as Buyers does, read at one moment (one
// statement).
func (s *Store) ProductAndBuyers(ctx context.Context, productID int64, userIDs []string) (*seckill.Product, map[string]bool, error) {
	return s.path.productAndBuyers(ctx, productID, userIDs)
}

// Orders returns a page of a product's orders, oldest first (see
// seckill.OrderQuery for the two ways to page). One more row than the page
// is read, to tell whether a next page exists.
func (s *Store) Orders(ctx context.Context, productID int64, q seckill.OrderQuery) (*seckill.OrderList, error) {
	db := s.db.WithContext(ctx)
	page := db.Where("product_id = ?", productID).Order("id").Limit(q.Limit + 1)
	list := &seckill.OrderList{ProductID: productID}
	if q.Cursor {
		page = page.Where("id > ?", q.After)
	} else {
		var count int64
		if err := db.Model(&orderRow{}).Where("product_id = ?", productID).Count(&count).Error; err != nil {
			return nil, fmt.Errorf("store: count orders of product %d: %w", productID, err)
		}
		list.Count = &count
		page = page.Offset(q.Offset)
	}
	var rows []orderRow
	if err := page.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: orders of product %d: %w", productID, err)
	}
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
		list.Next = rows[len(rows)-1].ID
	}
	list.Orders = make([]*seckill.Order, len(rows))
	for i, r := range rows {
		list.Orders[i] = r.order()
	}
	return list, nil
}

// InsertOrder inserts o and adds one to the product's sold count (its
// reserved count, for a pending order), with no condition, and sets o.ID:
// the order insert of seckill's unfenced sequence, used only by the
// unfenced modes. A second live order of the same user for the same
// product matches seckill.ErrAlreadyPurchased. Sold and reserved count
// every order so inserted, so an oversell shows as more than the supply.
func (s *Store) InsertOrder(ctx context.Context, o *seckill.Order) error {
	return s.transaction(ctx, func(tx *gorm.DB) error {
		if err := insertOrders(tx, []*seckill.Order{o}); err != nil {
			return err
		}
		sold, reserved := placed([]*seckill.Order{o})
		res := tx.Exec("UPDATE products SET sold = sold + ?, reserved = reserved + ? WHERE id = ?", sold, reserved, o.ProductID)
		if res.Error != nil {
			return fmt.Errorf("store: count the order of user %q for product %d: %w", o.UserID, o.ProductID, res.Error)
		}
		return nil
	})
}

// insertOrders inserts orders in one statement and sets their ids.
func insertOrders(db *gorm.DB, orders []*seckill.Order) error {
	rows := make([]orderRow, len(orders))
	for i, o := range orders {
		rows[i] = orderRow{ProductID: o.ProductID, UserID: o.UserID, Fence: o.Fence, CreatedAt: o.CreatedAt,
			State: string(orderState(o)), ExpiresAt: expiresAt(o)}
	}
	if err := db.Create(&rows).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			err = seckill.ErrAlreadyPurchased
		}
		o := orders[0]
		return fmt.Errorf("store: insert %d order(s) for product %d, the first of user %q: %w", len(orders), o.ProductID, o.UserID, err)
	}
	for i, o := range orders {
		o.ID = rows[i].ID
	}
	return nil
}
