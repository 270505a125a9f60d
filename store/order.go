package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

func (r orderRow) order() *seckill.Order {
	return &seckill.Order{ID: r.ID, ProductID: r.ProductID, UserID: r.UserID, Fence: r.Fence, CreatedAt: r.CreatedAt}
}

// HasOrder reports whether userID already has an order for the product.
func (s *Store) HasOrder(ctx context.Context, productID int64, userID string) (bool, error) {
	var n int
	err := s.db.WithContext(ctx).
		Raw("SELECT EXISTS (SELECT 1 FROM orders WHERE product_id = ? AND user_id = ?)", productID, userID).
		Scan(&n).Error
	if err != nil {
		return false, fmt.Errorf("store: order of user %q for product %d: %w", userID, productID, err)
	}
	return n != 0, nil
}

// Orders returns a page of a product's orders, oldest first, and how many
// it has in all.
func (s *Store) Orders(ctx context.Context, productID int64, q seckill.OrderQuery) ([]*seckill.Order, int64, error) {
	db := s.db.WithContext(ctx)
	var count int64
	if err := db.Model(&orderRow{}).Where("product_id = ?", productID).Count(&count).Error; err != nil {
		return nil, 0, fmt.Errorf("store: count orders of product %d: %w", productID, err)
	}
	var rows []orderRow
	err := db.Where("product_id = ?", productID).Order("id").Limit(q.Limit).Offset(q.Offset).Find(&rows).Error
	if err != nil {
		return nil, 0, fmt.Errorf("store: orders of product %d: %w", productID, err)
	}
	orders := make([]*seckill.Order, len(rows))
	for i, r := range rows {
		orders[i] = r.order()
	}
	return orders, count, nil
}

// InsertOrder inserts o with no condition and sets o.ID: seed 002's order
// insert, used only by the unfenced modes. A second order of the same user
// for the same product matches seckill.ErrAlreadyPurchased.
func (s *Store) InsertOrder(ctx context.Context, o *seckill.Order) error {
	return insertOrder(s.db.WithContext(ctx), o)
}

func insertOrder(db *gorm.DB, o *seckill.Order) error {
	row := orderRow{ProductID: o.ProductID, UserID: o.UserID, Fence: o.Fence, CreatedAt: o.CreatedAt}
	if err := db.Create(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			err = seckill.ErrAlreadyPurchased
		}
		return fmt.Errorf("store: insert order of user %q for product %d: %w", o.UserID, o.ProductID, err)
	}
	o.ID = row.ID
	return nil
}
