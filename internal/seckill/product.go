package seckill

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Limits on what a client may send. They bound the work one request can ask
// for and keep every number far from overflowing.
const (
	MaxNameLength   = 200        // characters, not bytes
	MaxStock        = 10_000_000 // per product
	MaxUserIDLength = 64
)

// Product is an item on sale. For every product at every moment, Stock +
// Reserved + Sold is its supply: what it was created or last restocked
// with, plus what was reserved and sold then.
type Product struct {
	ID    int64
	Name  string
	Stock int64 // items available: on sale now
	// Reserved counts the items of pending orders: bought, not yet paid
	// (with a payment window; always 0 without one).
	Reserved int64
	Sold     int64 // items of paid orders: written with them, in the same transaction

	// Fence is the largest fencing token that has claimed the product (0
	// before any). Only the holder of that token may write its stock.
	Fence int64
}

// Inventory sums a set of products: how many there are, their stock,
// reserved and sold counts, and how many have no stock left.
type Inventory struct {
	Products int64
	Stock    int64
	Reserved int64
	Sold     int64
	SoldOut  int64 // products whose stock is 0 or less
}

// Add counts p in i.
func (i *Inventory) Add(p *Product) {
	i.Products++
	i.Stock += p.Stock
	i.Reserved += p.Reserved
	i.Sold += p.Sold
	if p.Stock <= 0 {
		i.SoldOut++
	}
}

// Order is one item bought by one user. With a payment window it is a
// reservation: pending until paid, cancelled or expired, each at most once
// (docs/reservations.md); without one it is created paid.
type Order struct {
	ID        int64
	ProductID int64
	UserID    string
	Fence     int64 // token of the lock holder that wrote it; 0 when unfenced
	CreatedAt time.Time
	State     OrderState
	// ExpiresAt is when a pending order's window ends: created at plus
	// the window, by the clock of the replica that made it. Zero for an
	// order created paid.
	ExpiresAt time.Time
	// ClosedAt is when the order left pending: by the replica's clock in
	// the transaction of a payment or a cancel; for an expiry, read once
	// the expiry had committed (an upper bound of when the unit came
	// back), and zero if the replica stopped in between. Zero while
	// pending, and for an order created paid.
	ClosedAt time.Time
}

// OrderState is where an order is in its life.
type OrderState string

// The states of an order. Pending goes to one of the three others, once;
// they are final.
const (
	OrderPending   OrderState = "pending"
	OrderPaid      OrderState = "paid"
	OrderCancelled OrderState = "cancelled"
	OrderExpired   OrderState = "expired"
)

// Live reports whether an order in state s holds its unit for its user:
// pending or paid. A user holds at most one live order per product.
func (s OrderState) Live() bool { return s == OrderPending || s == OrderPaid }

// closedErr is the error of a move asked of an order that already left
// pending for state s.
func (s OrderState) closedErr() error {
	switch s {
	case OrderPaid:
		return ErrOrderPaid
	case OrderCancelled:
		return ErrOrderCancelled
	case OrderExpired:
		return ErrOrderExpired
	}
	return nil
}

// LockName is the name of the lock that guards a product's stock. Every
// replica derives the same name from the id, so they contend for one lock.
func LockName(productID int64) string {
	return "product:" + strconv.FormatInt(productID, 10)
}

// ValidateProductID checks that id can name a product.
func ValidateProductID(id int64) error {
	if id <= 0 {
		return Invalid("id", "must be a positive integer")
	}
	return nil
}

// ValidateName checks a product name: 1 to MaxNameLength characters of
// valid UTF-8.
func ValidateName(name string) error {
	n := utf8.RuneCountInString(name)
	if n < 1 || n > MaxNameLength || !utf8.ValidString(name) {
		return Invalid("name", "must be 1 to "+strconv.Itoa(MaxNameLength)+" characters")
	}
	return nil
}

// ValidateStock checks a stock level: 0 to MaxStock.
func ValidateStock(stock int64) error {
	if stock < 0 || stock > MaxStock {
		return Invalid("stock", "must be an integer from 0 to "+strconv.Itoa(MaxStock))
	}
	return nil
}

// ValidateUserID checks a user id: 1 to MaxUserIDLength characters from
// A-Z a-z 0-9 _ . : - (enough for UUIDs and "tenant:user" ids, and safe to
// log and put in a URL without escaping).
func ValidateUserID(id string) error {
	ok := len(id) >= 1 && len(id) <= MaxUserIDLength
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '_' || c == '.' || c == ':' || c == '-'
	}
	if !ok {
		return Invalid("user_id", "must be 1 to "+strconv.Itoa(MaxUserIDLength)+" characters from A-Z a-z 0-9 _ . : -")
	}
	return nil
}

// validatePurchase checks a purchase's input, the product id first: every
// design answers bad input alike, before it touches anything.
func validatePurchase(productID int64, userID string) error {
	if err := ValidateProductID(productID); err != nil {
		return err
	}
	return ValidateUserID(userID)
}

// CheckMove is the rule of paying or cancelling order o for userID at now:
// only the order's user may, only while it is pending, and only before its
// window ends. It returns nil, or an error matching ErrNotYourOrder,
// ErrOrderPaid, ErrOrderCancelled or ErrOrderExpired.
func CheckMove(o *Order, userID string, now time.Time) error {
	switch {
	case o.UserID != userID:
		return fmt.Errorf("order %d: %w", o.ID, ErrNotYourOrder)
	case o.State != OrderPending:
		return fmt.Errorf("order %d: %w", o.ID, o.State.closedErr())
	case !now.Before(o.ExpiresAt):
		return fmt.Errorf("order %d, due at %v: %w", o.ID, o.ExpiresAt, ErrOrderExpired)
	}
	return nil
}
