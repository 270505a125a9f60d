package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

func (r productRow) product() *seckill.Product {
	return &seckill.Product{ID: r.ID, Name: r.Name, Stock: r.Stock, Reserved: r.Reserved, Sold: r.Sold, Fence: r.Fence}
}

// CreateProduct inserts p and sets p.ID.
func (s *Store) CreateProduct(ctx context.Context, p *seckill.Product) error {
	row := productRow{Name: p.Name, Stock: p.Stock}
	if err := s.gate.write(ctx, func() error {
		return s.db.WithContext(ctx).Create(&row).Error
	}); err != nil {
		return fmt.Errorf("store: create product: %w", err)
	}
	p.ID, p.Fence, p.Reserved, p.Sold = row.ID, row.Fence, 0, 0
	return nil
}

// Product returns one product, or an error matching seckill.ErrNotFound. It
// reads one row by its primary key, whatever the number of orders.
func (s *Store) Product(ctx context.Context, id int64) (*seckill.Product, error) {
	return product(s.db.WithContext(ctx), id)
}

// product reads one product through db, which may be a transaction.
func product(db *gorm.DB, id int64) (*seckill.Product, error) {
	var rows []productRow
	if err := db.Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: product %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("store: product %d: %w", id, seckill.ErrNotFound)
	}
	return rows[0].product(), nil
}

// Products returns every product, by id.
func (s *Store) Products(ctx context.Context) ([]*seckill.Product, error) {
	var rows []productRow
	if err := s.db.WithContext(ctx).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: products: %w", err)
	}
	products := make([]*seckill.Product, len(rows))
	for i, r := range rows {
		products[i] = r.product()
	}
	return products, nil
}

// ProductsByID returns the products with these ids, by id, in one
// statement; an id with no product is left out. It reads one row per id by
// its primary key, so its cost grows with len(ids), not with the number of
// products. Each id is one bound parameter: keep ids to a few thousand.
func (s *Store) ProductsByID(ctx context.Context, ids []int64) ([]*seckill.Product, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []productRow
	if err := s.db.WithContext(ctx).Where("id IN ?", ids).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: %d products by id: %w", len(ids), err)
	}
	products := make([]*seckill.Product, len(rows))
	for i, r := range rows {
		products[i] = r.product()
	}
	return products, nil
}

// inventorySQL sums the products table in one statement, so on both
// databases the sums are of one snapshot: a product being sold counts
// with its stock, reserved and sold counts as one write left them.
const inventorySQL = `SELECT COUNT(*) AS products,
	CAST(COALESCE(SUM(stock), 0) AS BIGINT) AS stock,
	CAST(COALESCE(SUM(reserved), 0) AS BIGINT) AS reserved,
	CAST(COALESCE(SUM(sold), 0) AS BIGINT) AS sold,
	COUNT(CASE WHEN stock <= 0 THEN 1 END) AS sold_out
	FROM products`

// Inventory sums every product except those whose ids are in except, in
// one statement that returns one row. The database reads every row of the
// products table for it (there is no index that sums), so it costs one
// scan inside the database, and no row sent back, per call. except lets a
// caller that read some products by id (ProductsByID) count every product
// once: those, as that read found them, and the others here. Each id is
// one bound parameter: keep except to a few thousand.
func (s *Store) Inventory(ctx context.Context, except []int64) (seckill.Inventory, error) {
	var row struct{ Products, Stock, Reserved, Sold, SoldOut int64 }
	q := s.db.WithContext(ctx)
	if len(except) == 0 {
		q = q.Raw(inventorySQL)
	} else {
		// Not "NOT IN ?" with an empty list: GORM writes that as NOT IN
		// (NULL), which is true for no row.
		q = q.Raw(inventorySQL+" WHERE id NOT IN ?", except)
	}
	if err := q.Scan(&row).Error; err != nil {
		return seckill.Inventory{}, fmt.Errorf("store: inventory: %w", err)
	}
	return seckill.Inventory{Products: row.Products, Stock: row.Stock, Reserved: row.Reserved, Sold: row.Sold, SoldOut: row.SoldOut}, nil
}

// SetStock sets a product's stock with no condition: the write-back of
// seckill's unfenced sequence, used only by the unfenced modes.
func (s *Store) SetStock(ctx context.Context, productID, stock int64) error {
	n, err := s.exec(ctx, "UPDATE products SET stock = ? WHERE id = ?", stock, productID)
	if err != nil {
		return fmt.Errorf("store: set stock of product %d: %w", productID, err)
	}
	if n == 0 {
		return fmt.Errorf("store: set stock of product %d: %w", productID, seckill.ErrNotFound)
	}
	return nil
}
