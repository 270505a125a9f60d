package seckill

import "strconv"

// Paging limits for listing a product's orders.
const (
	DefaultOrderLimit = 100
	MaxOrderLimit     = 1000
)

// OrderQuery selects a page of a product's orders, oldest first.
type OrderQuery struct {
	Limit  int // 1 to MaxOrderLimit
	Offset int // 0 or more
}

// Validate checks the page bounds.
func (q OrderQuery) Validate() error {
	if q.Limit < 1 || q.Limit > MaxOrderLimit {
		return Invalid("limit", "must be an integer from 1 to "+strconv.Itoa(MaxOrderLimit))
	}
	if q.Offset < 0 {
		return Invalid("offset", "must be a non-negative integer")
	}
	return nil
}

// OrderList is one page of a product's orders and how many there are in
// all.
type OrderList struct {
	ProductID int64
	Count     int64
	Orders    []*Order
}
