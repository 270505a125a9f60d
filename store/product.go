package store

import (
	"context"
	"fmt"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// productSelect reads products with their sold count. Sold is counted from
// the orders rather than kept as a column, so that it cannot drift from
// them: in the unfenced modes the stock column can be wrong (that is what
// they demonstrate), and the count is how the oversell is seen.
const productSelect = `SELECT p.id, p.name, p.stock, p.fence,
	(SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id) AS sold
FROM products p`

// productView is one row of productSelect.
type productView struct {
	ID    int64
	Name  string
	Stock int64
	Fence int64
	Sold  int64
}

func (v productView) product() *seckill.Product {
	return &seckill.Product{ID: v.ID, Name: v.Name, Stock: v.Stock, Sold: v.Sold, Fence: v.Fence}
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

// Product returns one product, or an error matching seckill.ErrNotFound.
func (s *Store) Product(ctx context.Context, id int64) (*seckill.Product, error) {
	var rows []productView
	if err := s.db.WithContext(ctx).Raw(productSelect+" WHERE p.id = ?", id).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: product %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("store: product %d: %w", id, seckill.ErrNotFound)
	}
	return rows[0].product(), nil
}

// Products returns every product, by id.
func (s *Store) Products(ctx context.Context) ([]*seckill.Product, error) {
	var rows []productView
	if err := s.db.WithContext(ctx).Raw(productSelect + " ORDER BY p.id").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: products: %w", err)
	}
	products := make([]*seckill.Product, len(rows))
	for i, r := range rows {
		products[i] = r.product()
	}
	return products, nil
}

// SetStock sets a product's stock with no condition: seed 002's write-back,
// used only by the unfenced modes.
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
