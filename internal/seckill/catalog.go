package seckill

import "context"

// catalog is what every design serves from the database alone: creating a
// product, reading products, paging a product's orders. Each design embeds
// it; the counter designs replace its reads, whose stock and sold count
// come from Redis there.
type catalog struct {
	store Store
}

// CreateProduct puts a new product on sale.
func (c catalog) CreateProduct(ctx context.Context, name string, stock int64) (*Product, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ValidateStock(stock); err != nil {
		return nil, err
	}
	p := &Product{Name: name, Stock: stock}
	if err := c.store.CreateProduct(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Product returns one product.
func (c catalog) Product(ctx context.Context, id int64) (*Product, error) {
	if err := ValidateProductID(id); err != nil {
		return nil, err
	}
	return c.store.Product(ctx, id)
}

// Products returns every product.
func (c catalog) Products(ctx context.Context) ([]*Product, error) {
	return c.store.Products(ctx)
}

// ProductsByID returns the products with these ids, by id; an id with no
// product is left out. One read of the store, whose cost follows the ids.
func (c catalog) ProductsByID(ctx context.Context, ids []int64) ([]*Product, error) {
	return c.store.ProductsByID(ctx, ids)
}

// Inventory sums every product but those whose ids are in except: one sum
// computed by the database.
func (c catalog) Inventory(ctx context.Context, except []int64) (Inventory, error) {
	return c.store.Inventory(ctx, except)
}

// Orders returns a page of a product's orders.
func (c catalog) Orders(ctx context.Context, productID int64, q OrderQuery) (*OrderList, error) {
	if err := ValidateProductID(productID); err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	// Checked first so that a missing product is a 404, not an empty list.
	if _, err := c.store.Product(ctx, productID); err != nil {
		return nil, err
	}
	return c.store.Orders(ctx, productID, q)
}
