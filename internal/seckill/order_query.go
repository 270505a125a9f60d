package seckill

import "strconv"

// Paging limits for listing a product's orders.
const (
	DefaultOrderLimit = 100
	MaxOrderLimit     = 1000
)

// OrderQuery selects a page of a product's orders, oldest (smallest id)
// first, in one of two ways:
//
//   - By cursor (Cursor set): the orders with ids above After, which is 0
//     for the first page and the previous page's Next after that. A page
//     costs O(Limit) however many orders there are, and orders inserted
//     between two pages are neither skipped nor repeated.
//   - By offset: skip Offset orders. The database must step over all of
//     them, so reading every order this way costs O(orders²); the reply
//     also counts every order. Kept for clients of the first API version.
type OrderQuery struct {
	Limit  int   // 1 to MaxOrderLimit
	Offset int   // 0 or more; only without Cursor
	After  int64 // 0 or more; only with Cursor
	Cursor bool
}

// Validate checks the page bounds.
func (q OrderQuery) Validate() error {
	if q.Limit < 1 || q.Limit > MaxOrderLimit {
		return Invalid("limit", "must be an integer from 1 to "+strconv.Itoa(MaxOrderLimit))
	}
	if q.Offset < 0 {
		return Invalid("offset", "must be a non-negative integer")
	}
	if q.After < 0 {
		return Invalid("after", "must be a non-negative integer")
	}
	if q.Cursor && q.Offset != 0 {
		return Invalid("offset", "cannot be combined with after: page with after alone")
	}
	return nil
}

// OrderList is one page of a product's orders.
type OrderList struct {
	ProductID int64
	Orders    []*Order
	// Next is the After of the following page, or 0 when this page is the
	// last one there is now.
	Next int64
	// Count is the number of orders in all, for offset pages only (nil
	// with a cursor, where counting would cost O(orders) per page).
	Count *int64
}
