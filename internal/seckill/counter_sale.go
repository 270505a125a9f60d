package seckill

import (
	"context"
	"fmt"
	"time"
)

// orderWriteTimeout bounds an order's write once its item is taken. The
// write does not stop when the buyer goes away: the item is taken either
// way, and a write that might have committed as it was cancelled could
// not be undone safely.
const orderWriteTimeout = 10 * time.Second

// CounterSale is the redis-counter design: a Lua script in Redis checks
// the buyer set and the stock counter and takes one (Counter.Take), then
// the order is inserted into the database, and only then does the buyer
// get the 201. An insert that fails gives the item back (Counter.Undo).
// No lock, and the database writes one row per purchase, with nothing to
// wait for: the counter serialises the buyers, one script at a time.
//
// What it gives up: the counter and the orders are two systems, and
// nothing ties a take to its insert. A replica that dies between the two
// took an item that no order holds: the counter says sold, the orders
// say otherwise, and the item is lost to the sale. And a Redis that
// forgets the counter gets it back from the orders, which do not have the
// purchases still between their take and their insert (see counter.go).
type CounterSale struct {
	counterBook
}

// NewCounterSale returns the redis-counter design over counter and store.
// Of opts it uses Now, Chaos (called between the take and the insert),
// Recorder, Counter and Logger.
func NewCounterSale(counter Counter, store CounterStore, opts Options) *CounterSale {
	return &CounterSale{counterBook: newCounterBook(counter, store, opts)}
}

// Purchase sells one item of a product to a user: take it in Redis, insert
// the order, answer. The error matches ErrInvalid, ErrNotFound, ErrSoldOut
// or ErrAlreadyPurchased, or is a failure of Redis or the database.
func (s *CounterSale) Purchase(ctx context.Context, productID int64, userID string) (order *Order, err error) {
	start := s.now()
	defer func() { s.rec.PurchaseDone(OutcomeOf(err), s.now().Sub(start)) }()
	if err := validatePurchase(productID, userID); err != nil {
		return nil, err
	}
	// The decision: one script, which builds the counter first if Redis
	// has none (ErrNotFound comes from there, for a product that does not
	// exist).
	var ticket string
	err = s.withCounter(ctx, productID, func() error {
		ticket, err = s.counter.Take(ctx, productID, userID)
		return err
	})
	if err != nil {
		return nil, err
	}
	// From here until the insert returns, the item is taken and no order
	// holds it: the window a dying replica leaves open.
	s.crec.OrdersPending(1)
	defer s.crec.OrdersPending(-1)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orderWriteTimeout)
	defer cancel()
	s.chaos(wctx, []int64{productID})
	o := &Order{ProductID: productID, UserID: userID, CreatedAt: s.now().UTC()}
	if err := s.store.AddOrder(wctx, o); err != nil {
		// Give the item back. A buyer the buyer set had forgotten (the
		// counter was rebuilt) is refused here by the unique index: the
		// answer is then already_purchased, as it should have been.
		if uerr := s.counter.Undo(wctx, productID, userID, ticket); uerr != nil {
			s.log.Error("undo a take whose order was not written: the counter keeps the item",
				"product", productID, "user", userID, "err", uerr)
			// Not err's sentinel: the buyer is told neither that the
			// item is sold nor that it is not.
			return nil, fmt.Errorf("seckill: the order was not written (%v), and undoing the take failed: %w", err, uerr)
		}
		return nil, err
	}
	return o, nil
}
