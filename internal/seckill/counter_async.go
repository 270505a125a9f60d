package seckill

import (
	"context"
	"time"
)

// AsyncCounterSale is the redis-counter-async design: the same script as
// CounterSale's checks the buyer set and the stock counter and takes one,
// and in the same step appends the order to a queue in Redis
// (OrderQueue.TakeQueued); the buyer gets the 201 at once. A background
// OrderWriter in every replica takes orders off the queue and writes them
// to the database in batches. Nothing on the purchase path touches the
// database.
//
// The take and the queued order are one script, so a replica that dies
// after it loses nothing: the order is in Redis, and another replica's
// writer claims it from a writer that stopped before writing it. Writes
// are idempotent (a user's second order for a product is skipped), so an
// order written twice, by a writer that died after writing and before
// acknowledging, is written once.
//
// What it gives up: a 201 is a promise that the order will be written, not
// an order. The order's id is 0 in the answer, the orders list shows it
// only once written, and until then the only copy is in Redis: a Redis
// that loses its data (a restart without persistence, a failover to a
// replica that was behind) loses the orders not yet written, and since
// the counter is rebuilt from the orders there are (see counter.go), their
// items are sold again.
type AsyncCounterSale struct {
	counterBook
	queue OrderQueue
}

// OrderQueue is the queue of the orders AsyncCounterSale has promised and
// not yet written: a Redis Stream read by the replicas' writers as one
// consumer group (package internal/counter implements it).
type OrderQueue interface {
	// TakeQueued is Counter.Take for o's product and user that, in the
	// same script, appends o to the queue when it takes the item.
	TakeQueued(ctx context.Context, o *Order) error
	// Read gives the consumer up to max orders no consumer has been given,
	// waiting up to block for the first (0: not at all).
	Read(ctx context.Context, consumer string, max int, block time.Duration) ([]QueuedOrder, error)
	// Claim gives the consumer up to max orders that were given to a
	// consumer (itself included) at least minIdle ago and never
	// acknowledged: a writer died or failed to write them.
	Claim(ctx context.Context, consumer string, minIdle time.Duration, max int) ([]QueuedOrder, error)
	// Ack takes written orders off the queue.
	Ack(ctx context.Context, ids []string) error
}

// QueuedOrder is an order in the queue, with the queue's id for it.
type QueuedOrder struct {
	ID    string
	Order *Order
}

// It has no payment window, and so no reservations: its orders are final
// at once (Pay and Cancel answer ErrOrderPaid). A window needs the buyer
// to be able to pay within it, and here the 201 comes before the order
// exists: it has no id to pay or cancel with until a writer has written
// it, which may take up to ORDER_CLAIM_IDLE after a writer dies, and
// never happens for the orders a Redis that lost its data had queued.
// NewAsyncCounterSale refuses a window rather than half-support it.

// NewAsyncCounterSale returns the redis-counter-async design over counter,
// queue (one Redis: *counter.Counter is both) and store. Of opts it uses
// Now, Recorder, Counter and Logger; Chaos is the OrderWriter's. The
// orders are written by the OrderWriters the caller runs. It panics when
// opts has a PayWindow: a wiring mistake, reported where the design is
// built rather than at the first purchase.
func NewAsyncCounterSale(counter Counter, queue OrderQueue, store CounterStore, opts Options) *AsyncCounterSale {
	if opts.PayWindow > 0 {
		panic("seckill: the redis-counter-async design has no payment window: its 201 comes before the order exists")
	}
	return &AsyncCounterSale{counterBook: newCounterBook(counter, store, opts), queue: queue}
}

// Purchase sells one item of a product to a user: take it and queue its
// order in Redis, answer. The order it returns has no id yet. The error
// matches ErrInvalid, ErrNotFound, ErrSoldOut or ErrAlreadyPurchased, or
// is a failure of Redis (or of the database, when building the counter).
func (s *AsyncCounterSale) Purchase(ctx context.Context, productID int64, userID string) (order *Order, err error) {
	start := s.now()
	defer func() { s.rec.PurchaseDone(OutcomeOf(err), s.now().Sub(start)) }()
	if err := validatePurchase(productID, userID); err != nil {
		return nil, err
	}
	o := &Order{ProductID: productID, UserID: userID, CreatedAt: s.now().UTC()}
	err = s.withCounter(ctx, productID, func() error { return s.queue.TakeQueued(ctx, o) })
	if err != nil {
		return nil, err
	}
	return o, nil
}
