package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The counter designs keep each product's stock in a counter in Redis and
// decide a purchase there, in one Lua script that checks the buyer and the
// stock and takes one: no lock, and the database sees only the orders.
// CounterSale writes the order before it answers; AsyncCounterSale answers
// at once and leaves the write to a background OrderWriter. This file is
// what the two share: the counter, where it comes from, and the reads and
// restocks that go through it.
//
// # Where the counter comes from
//
// A product's counter is its stock, its reserved and sold counts, a
// generation (moved on by every restock) and an epoch (new with every
// build), in one Redis hash, beside the set of its buyers. The database
// keeps the supply (Supply): the stock, reserved and sold counts as of the
// product's creation or its last restock, and the orders. The counter is
// built from it whenever Redis does not have it, by the first purchase,
// read or restock that finds it missing:
//
//	reserved = the pending orders in the database
//	sold     = the paid orders
//	stock    = recorded stock + recorded reserved + recorded sold - reserved - sold
//
// So a new product's counter is its stock, built on first use; and a Redis
// that lost the counter (a restart without persistence, a failover to a
// replica that never got it, a FLUSHALL) gets it back from the orders. The
// buyer set is not rebuilt: a buyer who bought before the loss passes the
// script again, and the database's unique index refuses the second order
// (CounterSale undoes the take; AsyncCounterSale's writer skips it). Each
// build gives the counter a new epoch, carried by every take's ticket, so
// that a take from a lost counter is never undone in the next one.
//
// What a rebuild cannot see is a take whose order is not written yet: it
// was counted by the counter that was lost and is not among the orders.
// The rebuilt counter sells that item again. In CounterSale the pending
// insert then lands too, and the sale oversells by the purchases in
// flight at the loss; in AsyncCounterSale the queue of unwritten orders is
// lost with the counter, so those buyers got a 201 and never get the
// order, and their items are sold again. The locked design has no such
// window: its fence makes the database refuse a write decided under a
// lock that was forgotten.
//
// # What a restock means
//
// PUT /products/:id/stock sets the stock left to sell, as in every design:
// the counter's stock becomes the new value and its sold count stays, in
// one script, which also moves the generation on. The counter is then
// recorded in the database as the new supply, only if its generation is
// newer than the one recorded (CounterStore.RecordRestock), so that a
// rebuild later starts from it and two racing restocks cannot leave the
// older one there. A take undone after a restock gives its buyer back but
// not its item: the restock has set the stock since.

// Count is a product's counter in Redis: the stock left, the reserved
// count (units of pending orders, with a payment window), the sold count,
// and the generation of the restock that last set it (0: never
// restocked).
type Count struct {
	Stock, Reserved, Sold, Gen int64
}

// Supply is what the database knows of a product's stock in the counter
// designs: the stock, reserved and sold counts recorded by its creation
// or its last restock (generation Gen), and the live orders it has now,
// pending and paid.
type Supply struct {
	Stock, Reserved, Sold, Gen int64
	Pending, Paid              int64
}

// count is the counter that supply gives: the units pending orders hold
// are reserved, those paid ones hold sold, and the rest of the supply
// recorded (stock + reserved + sold) is the stock.
func (s Supply) count() Count {
	return Count{Stock: max(s.Stock+s.Reserved+s.Sold-s.Pending-s.Paid, 0), Reserved: s.Pending, Sold: s.Paid, Gen: s.Gen}
}

// ErrNoCounter means Redis has no counter for the product: it must be
// built from the database first.
var ErrNoCounter = errors.New("no stock counter in Redis")

// Counter is the stock counters in Redis of the counter designs (package
// internal/counter implements it). Each method is one Lua script, so each
// is atomic against the others and against every purchase.
type Counter interface {
	// Take sells one item to userID: ErrAlreadyPurchased if the user is
	// in the product's buyer set, else ErrSoldOut at stock 0, else it
	// takes one from the stock, adds one to the sold count and the user
	// to the buyers, and returns a ticket that names the counter (which
	// build of it, which restock) the item was taken from. It returns
	// ErrNoCounter when there is no counter.
	Take(ctx context.Context, productID int64, userID string) (ticket string, err error)
	// Reserve is Take for a pending order: the item is counted reserved
	// rather than sold.
	Reserve(ctx context.Context, productID int64, userID string) (ticket string, err error)
	// Undo gives back what the Take or Reserve that returned ticket did:
	// the user leaves the buyers and the sold (or reserved) count goes
	// down by one, and the stock up by one unless a restock has set it
	// since. It does nothing when the counter was built again since (it
	// was rebuilt from the orders, which never had this take), or the
	// user is no longer a buyer.
	Undo(ctx context.Context, productID int64, userID, ticket string) error
	// Build sets the product's counter to c and empties its buyer set,
	// only if it has no counter; it returns the counter as it is after,
	// and whether this call set it.
	Build(ctx context.Context, productID int64, c Count) (Count, bool, error)
	// Restock sets the counter's stock, leaves its sold count, moves its
	// generation on, and returns it. It returns ErrNoCounter when there
	// is no counter.
	Restock(ctx context.Context, productID, stock int64) (Count, error)
	// Counts returns the counters of the products, nil for those that
	// have none.
	Counts(ctx context.Context, productIDs []int64) ([]*Count, error)
	// Epochs returns the epochs of the products' counters (which build
	// each is), "" for those that have none: read before the database
	// moves orders, and handed to Pay and GiveBack after, so that a
	// counter built in between is never told of a move it already
	// counted.
	Epochs(ctx context.Context, productIDs []int64) ([]string, error)
	// Pay moves n units from reserved to sold, the units of orders the
	// database has moved to paid, if the counter's epoch is still epoch;
	// it reports whether it did.
	Pay(ctx context.Context, productID int64, epoch string, n int) (bool, error)
	// GiveBack moves a unit from reserved back to the stock for each of
	// users, whose orders the database has cancelled or expired, and
	// takes them out of the buyers, if the counter's epoch is still
	// epoch; it reports whether it did.
	GiveBack(ctx context.Context, productID int64, epoch string, users []string) (bool, error)
	// Ping reports whether Redis answers, for readiness.
	Ping(ctx context.Context) error
}

// CounterRecorder is told what the counter designs do besides purchases,
// so that a replica can count it and a fault test can see that its fault
// happened. Methods must be fast and safe for concurrent use.
type CounterRecorder interface {
	// CounterBuilt is called when this replica built a counter from the
	// database.
	CounterBuilt(productID int64)
	// OrdersPending is called with +n when n items are taken whose orders
	// this replica is about to write, and with -n when it has written
	// them or given up: the orders that die with the replica.
	OrdersPending(n int)
	// OrdersWritten is called with the orders a writer inserted, and
	// OrdersClaimed with the queued orders it took over from a writer
	// that had stopped before writing them.
	OrdersWritten(n int)
	OrdersClaimed(n int)
	// UnitsReturning is called with +n when the database has taken back
	// n units (their orders cancelled or expired) that this replica is
	// about to give back to the counter, and with -n when it has given
	// them back or given up: the units that die with the replica.
	UnitsReturning(n int)
}

type nopCounterRecorder struct{}

func (nopCounterRecorder) CounterBuilt(int64) {}
func (nopCounterRecorder) OrdersPending(int)  {}
func (nopCounterRecorder) OrdersWritten(int)  {}
func (nopCounterRecorder) OrdersClaimed(int)  {}
func (nopCounterRecorder) UnitsReturning(int) {}

// counterBook is what both counter designs do the same way: build a
// missing counter, read products through their counters, restock.
type counterBook struct {
	catalog
	counter Counter
	store   CounterStore
	now     func() time.Time
	chaos   func(ctx context.Context, products []int64)
	rec     Recorder
	crec    CounterRecorder
	log     *slog.Logger
}

func newCounterBook(counter Counter, store CounterStore, opts Options) counterBook {
	o := opts.withDefaults()
	return counterBook{catalog: catalog{store: store}, counter: counter, store: store,
		now: o.Now, chaos: o.Chaos, rec: o.Recorder, crec: o.Counter, log: o.Logger}
}

// withCounter runs fn, and once more after building the product's counter
// if fn found none.
func (b *counterBook) withCounter(ctx context.Context, productID int64, fn func() error) error {
	err := fn()
	if !errors.Is(err, ErrNoCounter) {
		return err
	}
	if _, err := b.build(ctx, productID); err != nil {
		return err
	}
	return fn()
}

// build builds the product's counter from the database if Redis has none,
// and returns the counter there is.
func (b *counterBook) build(ctx context.Context, productID int64) (Count, error) {
	sup, err := b.store.Supply(ctx, productID)
	if err != nil {
		return Count{}, err
	}
	c, built, err := b.counter.Build(ctx, productID, sup.count())
	if err != nil {
		return Count{}, err
	}
	if built {
		b.crec.CounterBuilt(productID)
		b.log.Info("stock counter built from the database", "product", productID,
			"stock", c.Stock, "sold", c.Sold, "gen", c.Gen)
	}
	return c, nil
}

// Product returns one product, its stock and sold count from its counter:
// the numbers the purchases are decided on.
func (b *counterBook) Product(ctx context.Context, id int64) (*Product, error) {
	if err := ValidateProductID(id); err != nil {
		return nil, err
	}
	p, err := b.store.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := b.overlay(ctx, []*Product{p}); err != nil {
		return nil, err
	}
	return p, nil
}

// Products returns every product, each with its counter's numbers.
func (b *counterBook) Products(ctx context.Context) ([]*Product, error) {
	ps, err := b.store.Products(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.overlay(ctx, ps); err != nil {
		return nil, err
	}
	return ps, nil
}

// ProductsByID returns the products with these ids, by id, each with its
// counter's numbers: one read of the database and one pipelined read of
// the counters, both as many rows as ids.
func (b *counterBook) ProductsByID(ctx context.Context, ids []int64) ([]*Product, error) {
	ps, err := b.store.ProductsByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	if err := b.overlay(ctx, ps); err != nil {
		return nil, err
	}
	return ps, nil
}

// Inventory sums every product but those whose ids are in except, with
// their counters' numbers. The database's stock and sold are the supply a
// counter was built from, not the sales since, and Redis keeps no sum of
// the counters, so it reads every product and its counter: unlike the
// other designs' sum in the database, its cost grows with the number of
// products (as Products' does).
func (b *counterBook) Inventory(ctx context.Context, except []int64) (Inventory, error) {
	all, err := b.store.Products(ctx)
	if err != nil {
		return Inventory{}, err
	}
	skip := make(map[int64]bool, len(except))
	for _, id := range except {
		skip[id] = true
	}
	ps := all[:0]
	for _, p := range all {
		if !skip[p.ID] {
			ps = append(ps, p)
		}
	}
	if err := b.overlay(ctx, ps); err != nil {
		return Inventory{}, err
	}
	var inv Inventory
	for _, p := range ps {
		inv.Add(p)
	}
	return inv, nil
}

// overlay replaces the products' stock and sold count, as recorded in the
// database, with their counters', building those that are missing.
func (b *counterBook) overlay(ctx context.Context, ps []*Product) error {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	counts, err := b.counter.Counts(ctx, ids)
	if err != nil {
		return err
	}
	for i, p := range ps {
		c := counts[i]
		if c == nil {
			built, err := b.build(ctx, p.ID)
			if err != nil {
				return err
			}
			c = &built
		}
		p.Stock, p.Reserved, p.Sold = c.Stock, c.Reserved, c.Sold
	}
	return nil
}

// Restock sets a product's stock in its counter, then records the counter
// as the product's supply (see "What a restock means" above). The answer
// is the counter as the restock left it.
func (b *counterBook) Restock(ctx context.Context, id, stock int64) (*Product, error) {
	if err := ValidateProductID(id); err != nil {
		return nil, err
	}
	if err := ValidateStock(stock); err != nil {
		return nil, err
	}
	p, err := b.store.Product(ctx, id)
	if err != nil {
		return nil, err
	}
	var c Count
	err = b.withCounter(ctx, id, func() error {
		c, err = b.counter.Restock(ctx, id, stock)
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := b.store.RecordRestock(ctx, id, c); err != nil {
		// The counter has the new stock and sells it; only a rebuild
		// would miss it, until the next restock is recorded.
		return nil, fmt.Errorf("seckill: record the restock of product %d (the counter has it): %w", id, err)
	}
	p.Stock, p.Reserved, p.Sold = c.Stock, c.Reserved, c.Sold
	return p, nil
}

// Ready reports whether the database and Redis answer.
func (b *counterBook) Ready(ctx context.Context) error {
	if err := b.store.Ping(ctx); err != nil {
		return fmt.Errorf("seckill: database not ready: %w", err)
	}
	if err := b.counter.Ping(ctx); err != nil {
		return fmt.Errorf("seckill: Redis not ready: %w", err)
	}
	return nil
}
