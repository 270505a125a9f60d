package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

func (r productRow) product() *seckill.Product {
	return &seckill.Product{ID: r.ID, Name: r.Name, Stock: r.Stock, Sold: r.Sold, Fence: r.Fence}
}

// CreateProduct inserts p and sets p.ID.
func (s *Store) CreateProduct(ctx context.Context, p *seckill.Product) error {
	row := productRow{Name: p.Name, Stock: p.Stock}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return fmt.Errorf("store: create product: %w", err)
	}
	p.ID, p.Fence, p.Sold = row.ID, row.Fence, 0
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

// SetStock sets a product's stock with no condition: the write-back of
// seckill's unfenced sequence, used only by the unfenced modes.
func (s *Store) SetStock(ctx context.Context, productID, stock int64) error {
	res := s.db.WithContext(ctx).Exec("UPDATE products SET stock = ? WHERE id = ?", stock, productID)
	if res.Error != nil {
		return fmt.Errorf("store: set stock of product %d: %w", productID, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("store: set stock of product %d: %w", productID, seckill.ErrNotFound)
	}
	return nil
}
