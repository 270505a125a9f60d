package handlers

import "github.com/seckill-ref/seckill/internal/seckill"

// The response shapes of API v1. They are spelled out here, apart from the
// domain types, so that the wire format changes only on purpose: the
// product's fence, for one, is internal and never sent.

type productJSON struct {
	ID    int64  `json:"id"`
	Name  string `json:"name"`
	Stock int64  `json:"stock"`
	Sold  int64  `json:"sold"`
}

func toProductJSON(p *seckill.Product) productJSON {
	return productJSON{ID: p.ID, Name: p.Name, Stock: p.Stock, Sold: p.Sold}
}

type orderJSON struct {
	ID        int64  `json:"id"`
	ProductID int64  `json:"product_id"`
	UserID    string `json:"user_id"`
	Fence     int64  `json:"fence"`
	CreatedAt string `json:"created_at"`
}

// orderListJSON is a page of orders. Next is the "after" of the following
// page, null on the last; count is there only for offset pages.
type orderListJSON struct {
	ProductID int64       `json:"product_id"`
	Count     *int64      `json:"count,omitempty"`
	Orders    []orderJSON `json:"orders"`
	Next      *int64      `json:"next"`
}

// timeFormat is RFC 3339 in UTC with milliseconds, a fixed width that
// sorts as text.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func toOrderJSON(o *seckill.Order) orderJSON {
	return orderJSON{
		ID:        o.ID,
		ProductID: o.ProductID,
		UserID:    o.UserID,
		Fence:     o.Fence,
		CreatedAt: o.CreatedAt.UTC().Format(timeFormat),
	}
}

// The request bodies. Pointers tell a missing field from a zero one.

type createProductRequest struct {
	Name  *string `json:"name"`
	Stock *int64  `json:"stock"`
}

type restockRequest struct {
	Stock *int64 `json:"stock"`
}

type purchaseRequest struct {
	UserID *string `json:"user_id"`
}
