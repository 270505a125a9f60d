package seckill

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Conditional is the conditional design: no lock and no Redis, the
// database alone decides. A purchase is one transaction,
//
//	UPDATE products SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0
//	INSERT INTO orders ...
//
// and the row's own write lock is what serialises the buyers of a product:
// the condition is checked on the row as it is when the update runs, never
// on a value read earlier, so there is no read-then-write to race. The
// unique index on (product, user) refuses a second order, and its failure
// rolls the decrement back.
//
// What it gives up: every purchase of a product writes the same row, so
// they all queue for that row's lock (SQLite: for the whole file), and
// the database's commit rate is the sale's rate. Sold-out answers take a
// transaction too: the update that finds no stock is the answer.
type Conditional struct {
	catalog
	store ConditionalStore
	now   func() time.Time
	rec   Recorder
}

// NewConditional returns the conditional design over store. Of opts it
// uses Now and Recorder; there is no lock to wait for and no step between
// the decision and the write for a chaos hook to stall.
func NewConditional(store ConditionalStore, opts Options) *Conditional {
	o := opts.withDefaults()
	return &Conditional{catalog: catalog{store: store}, store: store, now: o.Now, rec: o.Recorder}
}

// Purchase sells one item of a product to a user. The error matches
// ErrInvalid, ErrNotFound, ErrSoldOut or ErrAlreadyPurchased, or is a
// failure of the database.
func (c *Conditional) Purchase(ctx context.Context, productID int64, userID string) (order *Order, err error) {
	start := c.now()
	defer func() { c.rec.PurchaseDone(OutcomeOf(err), c.now().Sub(start)) }()
	if err := validatePurchase(productID, userID); err != nil {
		return nil, err
	}
	// No read before the transaction: the update decides, on the row as
	// it is, and a buyer who has an order, or finds no stock, is told so
	// by the same transaction (BuyConditionally). A read first would
	// answer those without the row's write lock, and cost every other
	// purchase a read it does not need; in a sale that sells, most do.
	o := &Order{ProductID: productID, UserID: userID, CreatedAt: c.now().UTC()}
	if err := c.store.BuyConditionally(ctx, o); err != nil {
		return nil, err
	}
	return o, nil
}

// Restock sets a product's stock in one transaction, which waits for the
// row like a purchase does, and answers the state it wrote.
func (c *Conditional) Restock(ctx context.Context, id, stock int64) (*Product, error) {
	if err := ValidateProductID(id); err != nil {
		return nil, err
	}
	if err := ValidateStock(stock); err != nil {
		return nil, err
	}
	return c.store.Restock(ctx, id, stock)
}

// Ready reports whether the database answers: the design uses nothing
// else.
func (c *Conditional) Ready(ctx context.Context) error {
	if err := c.store.Ping(ctx); err != nil {
		return fmt.Errorf("seckill: database not ready: %w", err)
	}
	return nil
}

// withDefaults fills in the options every design shares.
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Chaos == nil {
		o.Chaos = func(context.Context, []int64) {}
	}
	if o.Recorder == nil {
		o.Recorder = nopRecorder{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Counter == nil {
		o.Counter = nopCounterRecorder{}
	}
	return o
}
