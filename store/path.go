package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// purchasePath is the statements every purchase runs: the fast path's read
// before the lock, the claim and the reads under it, and the fenced write.
// Each database has its own: gormPath sends the statements of fence.go one
// by one through GORM, which on SQLite costs a library call each; pgxPath
// (pgpath.go) sends the same steps to PostgreSQL, a network hop away, in
// one round trip per step, with plans that do not depend on statistics.
type purchasePath interface {
	// productAndBuyers is the product and which of userIDs have an order
	// for it.
	productAndBuyers(ctx context.Context, productID int64, userIDs []string) (*seckill.Product, map[string]bool, error)
	// buyers is which of userIDs have an order for the product.
	buyers(ctx context.Context, productID int64, userIDs []string) (map[string]bool, error)
	// claimAndRead claims the fence, then reads the product and which of
	// userIDs have an order for it.
	claimAndRead(ctx context.Context, productID, token int64, userIDs []string) (*seckill.Product, map[string]bool, error)
	// placeOrders is PlaceOrders.
	placeOrders(ctx context.Context, productID, token, newStock int64, orders []*seckill.Order) error
	// productsAndBuyers, claimAndReadAll and placeOrdersAll are
	// ProductsAndBuyers, ClaimAndReadAll and PlaceOrdersAll (all.go).
	productsAndBuyers(ctx context.Context, want []seckill.BuyersOf) (map[int64]*seckill.Product, map[int64]map[string]bool, error)
	claimAndReadAll(ctx context.Context, claims []seckill.Claim) ([]seckill.Claimed, error)
	placeOrdersAll(ctx context.Context, ps []seckill.Placement) ([]error, error)
	// writeOrders is WriteOrders (counter.go).
	writeOrders(ctx context.Context, orders []*seckill.Order) (int, error)
}

// gormPath is the purchase's statements on SQLite: through GORM, one at a
// time, and the statements of several products at once (all.go), prepared
// once on the database underneath.
type gormPath struct {
	db    *gorm.DB
	sqlDB *sql.DB
	stmts *sqliteStmts
	gate  writeGate
}

// productAndBuyers is readAll for one product: one statement, so one
// snapshot.
func (g gormPath) productAndBuyers(ctx context.Context, productID int64, userIDs []string) (*seckill.Product, map[string]bool, error) {
	products, bought, err := g.readAll(ctx, dbStmts{}, []seckill.BuyersOf{{ProductID: productID, UserIDs: userIDs}})
	if err != nil {
		return nil, nil, fmt.Errorf("store: product %d and buyers among %d users: %w", productID, len(userIDs), err)
	}
	p := products[productID]
	if p == nil {
		return nil, nil, fmt.Errorf("store: product %d: %w", productID, seckill.ErrNotFound)
	}
	if bought[productID] == nil {
		return p, map[string]bool{}, nil
	}
	return p, bought[productID], nil
}

func (g gormPath) buyers(ctx context.Context, productID int64, userIDs []string) (map[string]bool, error) {
	var found []string
	err := g.db.WithContext(ctx).Model(&orderRow{}).
		Where("product_id = ? AND user_id IN ? AND "+liveState, productID, userIDs).
		Pluck("user_id", &found).Error
	if err != nil {
		return nil, fmt.Errorf("store: buyers among %d users of product %d: %w", len(userIDs), productID, err)
	}
	return boughtSet(found), nil
}

func (g gormPath) claimAndRead(ctx context.Context, productID, token int64, userIDs []string) (*seckill.Product, map[string]bool, error) {
	var res *gorm.DB
	if err := g.gate.write(ctx, func() error {
		res = g.db.WithContext(ctx).Exec(claimFence, token, productID, token)
		return nil
	}); err != nil {
		return nil, nil, err
	}
	if res.Error != nil {
		return nil, nil, fmt.Errorf("store: claim fence %d of product %d: %w", token, productID, res.Error)
	}
	if res.RowsAffected == 0 {
		return nil, nil, fmt.Errorf("store: claim fence %d of product %d: %w", token, productID, seckill.ErrFenceRejected)
	}
	return g.productAndBuyers(ctx, productID, userIDs)
}

func (g gormPath) placeOrders(ctx context.Context, productID, token, newStock int64, orders []*seckill.Order) error {
	if len(orders) == 0 {
		return errNoOrders
	}
	return g.gate.write(ctx, func() error {
		return g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			sold, reserved := placed(orders)
			res := tx.Exec(placeFenced, newStock, sold, reserved, productID, token)
			if res.Error != nil {
				return fmt.Errorf("store: place %d order(s) for product %d under fence %d: %w", len(orders), productID, token, res.Error)
			}
			if res.RowsAffected == 0 {
				return fmt.Errorf("store: place %d order(s) for product %d under fence %d: %w", len(orders), productID, token, seckill.ErrFenceRejected)
			}
			return insertOrders(tx, orders)
		})
	})
}

// errNoOrders is PlaceOrders' answer to an empty batch: the service writes
// only batches with a winner, so one without is a mistake of the caller.
var errNoOrders = errors.New("store: place orders: no orders given")

// boughtSet is the set of the users found.
func boughtSet(found []string) map[string]bool {
	bought := make(map[string]bool, len(found))
	for _, u := range found {
		bought[u] = true
	}
	return bought
}
