package handlers

import "github.com/seckill-ref/seckill/internal/seckill"

// The response shapes of API v1. They are spelled out here, apart from the
// domain types, so that the wire format changes only on purpose: the
// product's fence, for one, is internal and never sent.

// productJSON is a product. Available is Stock under the name the
// reservations speak of: available + reserved + sold is the supply.
type productJSON struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Stock     int64  `json:"stock"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
}

func toProductJSON(p *seckill.Product) productJSON {
	return productJSON{ID: p.ID, Name: p.Name, Stock: p.Stock, Available: p.Stock, Reserved: p.Reserved, Sold: p.Sold}
}

// orderJSON is an order. ExpiresAt is there while the order has a window,
// ClosedAt once it left pending (see seckill.Order).
type orderJSON struct {
	ID        int64  `json:"id"`
	ProductID int64  `json:"product_id"`
	UserID    string `json:"user_id"`
	Fence     int64  `json:"fence"`
	CreatedAt string `json:"created_at"`
	State     string `json:"state"`
	ExpiresAt string `json:"expires_at,omitempty"`
	ClosedAt  string `json:"closed_at,omitempty"`
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
// sorts as text. edgeFormat has microseconds: the edges of a payment
// window, which a client checks against the times it saw.
const (
	timeFormat = "2006-01-02T15:04:05.000Z07:00"
	edgeFormat = "2006-01-02T15:04:05.000000Z07:00"
)

func toOrderJSON(o *seckill.Order) orderJSON {
	out := orderJSON{
		ID:        o.ID,
		ProductID: o.ProductID,
		UserID:    o.UserID,
		Fence:     o.Fence,
		CreatedAt: o.CreatedAt.UTC().Format(timeFormat),
		State:     string(o.State),
	}
	if !o.ExpiresAt.IsZero() {
		out.ExpiresAt = o.ExpiresAt.UTC().Format(edgeFormat)
	}
	if !o.ClosedAt.IsZero() {
		out.ClosedAt = o.ClosedAt.UTC().Format(edgeFormat)
	}
	return out
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
