package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// purchasePath is statements a purchase runs, written for each database:
// gormPath sends the portable ones through GORM; pgxPath (pgpath.go)
// sends PostgreSQL its own, with plans that do not depend on statistics.
type purchasePath interface {
	// buyers is which of userIDs have an order for the product.
	buyers(ctx context.Context, productID int64, userIDs []string) (map[string]bool, error)
}

// gormPath is the purchase's statements through GORM, one at a time.
type gormPath struct{ db *gorm.DB }

func (g gormPath) buyers(ctx context.Context, productID int64, userIDs []string) (map[string]bool, error) {
	var found []string
	err := g.db.WithContext(ctx).Model(&orderRow{}).
		Where("product_id = ? AND user_id IN ?", productID, userIDs).
		Pluck("user_id", &found).Error
	if err != nil {
		return nil, fmt.Errorf("store: buyers among %d users of product %d: %w", len(userIDs), productID, err)
	}
	return boughtSet(found), nil
}

// boughtSet is the set of the users found.
func boughtSet(found []string) map[string]bool {
	bought := make(map[string]bool, len(found))
	for _, u := range found {
		bought[u] = true
	}
	return bought
}
