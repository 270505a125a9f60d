package seckill

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test them with errors.Is: the errors returned by
// Service and Store wrap them with the details (which product, which
// statement), and the HTTP layer maps each to one status code.
var (
	// ErrInvalid means the input broke a rule (see InvalidError for which).
	ErrInvalid = errors.New("invalid input")

	// ErrNotFound means the product does not exist.
	ErrNotFound = errors.New("not found")

	// ErrSoldOut means the product has no stock left.
	ErrSoldOut = errors.New("sold out")

	// ErrAlreadyPurchased means the user already has an order for the
	// product: one order per user per product.
	ErrAlreadyPurchased = errors.New("already purchased")

	// ErrBusy means the purchase could not be made safely right now: the
	// lock was not acquired within the wait, or a newer holder took over.
	// Retrying later may succeed.
	ErrBusy = errors.New("busy")

	// ErrOrderNotFound means the order does not exist. It matches
	// ErrNotFound.
	ErrOrderNotFound = fmt.Errorf("%w: no such order", ErrNotFound)

	// ErrNotYourOrder means a user asked to pay or cancel an order of
	// another user.
	ErrNotYourOrder = errors.New("not this user's order")

	// ErrOrderPaid, ErrOrderCancelled and ErrOrderExpired mean the order
	// has left pending, for that state, so it can be neither paid nor
	// cancelled (ErrOrderExpired also when its window has passed and no
	// replica has expired it yet). Nothing was changed.
	ErrOrderPaid      = errors.New("order already paid")
	ErrOrderCancelled = errors.New("order cancelled")
	ErrOrderExpired   = errors.New("order expired: its payment window has passed")

	// ErrFenceRejected means a write was refused because a newer lock
	// holder had claimed the product's fence: this holder's lease ran out
	// while it worked. It matches ErrBusy, since the buyer should simply
	// retry, and is distinct so that it can be counted.
	ErrFenceRejected = fmt.Errorf("%w: a newer lock holder claimed the product", ErrBusy)
)

// InvalidError says which field broke which rule, in words meant for the
// person who sent the request. It matches ErrInvalid.
type InvalidError struct {
	Field   string // the field as the client names it, e.g. "user_id"
	Problem string // e.g. "must be 1 to 64 characters"
}

// Invalid returns an *InvalidError for field.
func Invalid(field, problem string) error {
	return &InvalidError{Field: field, Problem: problem}
}

// Error is "field: problem", which reads as a message to the client.
func (e *InvalidError) Error() string { return e.Field + ": " + e.Problem }

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }
