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
//
// With a payment window it has the locked design's life
// (docs/reservations.md), with no lock either: a purchase reserves
// (stock - 1, reserved + 1), a payment moves units from reserved to sold
// (Store.PayOrders, shared as the locked design's are: pays.go), and a
// cancel or an expiry puts units back with stock = stock + k, reserved =
// reserved - k in the transaction that moves the orders WHERE state =
// 'pending'. None of them writes back a value it read, so none needs a
// fence: each is a relative update under the row's own lock, and of two
// moves that race for one order the database lets one through. Every
// replica expires (ExpireDue, RunExpiry), in rounds across products.
type Conditional struct {
	catalog
	store     ConditionalStore
	now       func() time.Time
	rec       Recorder
	log       *slog.Logger
	payWindow time.Duration
	pays      *payments
}

// NewConditional returns the conditional design over store. Of opts it
// uses Now, PayWindow, Recorder and Logger; there is no lock to wait for
// and no step between the decision and the write for a chaos hook to
// stall.
func NewConditional(store ConditionalStore, opts Options) *Conditional {
	o := opts.withDefaults()
	return &Conditional{catalog: catalog{store: store}, store: store, now: o.Now, rec: o.Recorder, log: o.Logger,
		payWindow: o.PayWindow, pays: newPayments(store.PayOrders, o.Now, o.Recorder)}
}

// Purchase sells one item of a product to a user, or with a payment
// window reserves it. The error matches ErrInvalid, ErrNotFound,
// ErrSoldOut or ErrAlreadyPurchased, or is a failure of the database.
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
	o := &Order{ProductID: productID, UserID: userID, CreatedAt: c.now().UTC(), State: OrderPaid}
	if c.payWindow > 0 {
		o.State, o.ExpiresAt = OrderPending, o.CreatedAt.Add(c.payWindow)
	}
	if err := c.store.BuyConditionally(ctx, o); err != nil {
		return nil, err
	}
	return o, nil
}

// Pay pays for userID's pending order, as Service.Pay does: one shared
// transaction for the payments waiting in this process, no lock.
func (c *Conditional) Pay(ctx context.Context, orderID int64, userID string) (*Order, error) {
	if err := validateMove(orderID, userID); err != nil {
		return nil, err
	}
	return c.pays.pay(ctx, Payment{OrderID: orderID, UserID: userID})
}

// Cancel cancels userID's pending order and puts its unit back on sale,
// in one transaction with no lock (Store.CancelConditionally). Errors as
// Pay's.
func (c *Conditional) Cancel(ctx context.Context, orderID int64, userID string) (*Order, error) {
	if err := validateMove(orderID, userID); err != nil {
		return nil, err
	}
	o, err := c.store.CancelConditionally(ctx, orderID, userID, c.now().UTC())
	if err != nil {
		return nil, err
	}
	c.rec.OrdersClosed(OrderCancelled, 1)
	return o, nil
}

// ExpireDue expires the reservations whose window ended by now, in rounds
// of up to commitMaxProducts products, one transaction each
// (Store.ExpireConditionally), and returns how many orders it expired.
// Every replica runs it (RunExpiry): of two at once, the second finds the
// orders the first moved no longer pending.
func (c *Conditional) ExpireDue(ctx context.Context) (int, error) {
	return expireDue(ctx, c.store, c.now().UTC(), c.expireRound)
}

// expireRound expires the due orders of products in one transaction, and
// records when they came back (Store.MarkClosed) once it has committed.
func (c *Conditional) expireRound(ctx context.Context, products []int64, now time.Time) int {
	wctx, cancel := context.WithTimeout(ctx, batchWorkTimeout)
	defer cancel()
	expired, err := c.store.ExpireConditionally(wctx, products, now)
	if err != nil {
		c.log.Warn("expiry", "products", len(products), "err", err)
		return 0
	}
	var ids []int64
	for _, e := range expired {
		ids = append(ids, e...)
	}
	return markExpired(ctx, c.store, ids, c.now, c.rec, c.log)
}

// RunExpiry runs ExpireDue every interval until ctx ends: this replica's
// expiry, as Service.RunExpiry.
func (c *Conditional) RunExpiry(ctx context.Context, every time.Duration) {
	runExpiry(ctx, every, c.ExpireDue, c.log)
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
