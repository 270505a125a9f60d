package seckill

import (
	"context"
	"fmt"
	"slices"
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
//
// With a payment window it has the locked design's life
// (docs/reservations.md), with one guarantee less. A purchase reserves in
// the counter (Counter.Reserve) and inserts a pending order. A payment,
// a cancel and an expiry move the orders in the database first, each
// WHERE state = 'pending', and then tell the counter: a payment moves its
// unit from reserved to sold (Counter.Pay), a cancel or an expiry gives
// the unit back to the stock and the user back to the buyers who may buy
// (Counter.GiveBack). The database decides, so of two replicas expiring
// at once, or of a payment racing an expiry, one moves each order and
// only that one tells the counter: no unit comes back twice. The two
// writes cannot be one transaction, and they are in this order because
// the other one is worse: a unit given back in Redis before the database
// moves its order can be sold again to the next buyer while the move
// still fails (the order was paid meanwhile), selling it twice; a unit
// whose order moved and whose give-back never came (the replica died
// between the two) is lost to the sale, never sold twice. That is the
// guarantee it cannot keep: after such a crash the counter holds, as
// reserved, units no pending order holds, available + reserved + sold no
// longer matches the orders, and that user stays in the buyer set
// (already_purchased) though no live order is theirs, until Redis loses
// the counter and it is rebuilt from the database.
type CounterSale struct {
	counterBook
	payWindow   time.Duration
	expiryChaos func(ctx context.Context, products []int64)
	pays        *payments
}

// NewCounterSale returns the redis-counter design over counter and store.
// Of opts it uses Now, PayWindow, Chaos (called between the take and the
// insert), ExpiryChaos (called between the database's move of cancelled
// or expired orders and the counter's give-back), Recorder, Counter and
// Logger.
func NewCounterSale(counter Counter, store CounterStore, opts Options) *CounterSale {
	o := opts.withDefaults()
	s := &CounterSale{counterBook: newCounterBook(counter, store, o), payWindow: o.PayWindow, expiryChaos: o.ExpiryChaos}
	if s.expiryChaos == nil {
		s.expiryChaos = func(context.Context, []int64) {}
	}
	s.pays = newPayments(s.payRows, o.Now, o.Recorder)
	return s
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
	take := s.counter.Take
	if s.payWindow > 0 {
		take = s.counter.Reserve
	}
	var ticket string
	err = s.withCounter(ctx, productID, func() error {
		ticket, err = take(ctx, productID, userID)
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
	o := &Order{ProductID: productID, UserID: userID, CreatedAt: s.now().UTC(), State: OrderPaid}
	if s.payWindow > 0 {
		// The window starts at the insert: the order exists from then on.
		o.State, o.ExpiresAt = OrderPending, o.CreatedAt.Add(s.payWindow)
	}
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

// Pay pays for userID's pending order: the database moves it to paid (in
// a shared transaction, as Service.Pay's), then the counter counts its
// unit sold. The error matches ErrInvalid, ErrOrderNotFound,
// ErrNotYourOrder, ErrOrderPaid, ErrOrderCancelled or ErrOrderExpired, and
// then nothing changed.
func (s *CounterSale) Pay(ctx context.Context, orderID int64, userID string) (*Order, error) {
	if err := validateMove(orderID, userID); err != nil {
		return nil, err
	}
	return s.pays.pay(ctx, Payment{OrderID: orderID, UserID: userID})
}

// payRows writes a batch of payments: the counters' epochs first, read
// before the database moves the orders, then the move, then each
// product's units from reserved to sold in its counter. A payment the
// database made stands whatever the counter says: a counter that was
// built since (it counted the orders as the database had them) is left
// alone, and one that fails keeps the units reserved, a count off by the
// payments and no unit sold twice.
func (s *CounterSale) payRows(ctx context.Context, ps []Payment, now time.Time) ([]*Order, []error, error) {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.OrderID
	}
	found, err := s.store.OrdersByID(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	var products []int64
	for _, o := range found {
		if !slices.Contains(products, o.ProductID) {
			products = append(products, o.ProductID)
		}
	}
	epochs, err := s.counter.Epochs(ctx, products)
	if err != nil {
		return nil, nil, err
	}
	orders, errs, err := s.store.PayOrderRows(ctx, ps, now)
	if err != nil {
		return nil, nil, err
	}
	paid := map[int64]int{}
	for i, o := range orders {
		if errs[i] == nil {
			paid[o.ProductID]++
		}
	}
	for i, id := range products {
		if paid[id] == 0 {
			continue
		}
		moved, err := s.counter.Pay(ctx, id, epochs[i], paid[id])
		switch {
		case err != nil:
			s.log.Error("payments written, the counter not told: it counts their units reserved",
				"product", id, "orders", paid[id], "err", err)
		case !moved:
			s.log.Info("payments written to a counter built since their read: it has them from the database",
				"product", id, "orders", paid[id])
		}
	}
	return orders, errs, nil
}

// Cancel cancels userID's pending order: the database moves it to
// cancelled, then the counter gets its unit back and the user may buy
// again (see CounterSale for the order of the two and what a crash
// between them costs). Errors as Pay's.
func (s *CounterSale) Cancel(ctx context.Context, orderID int64, userID string) (*Order, error) {
	o, err := movable(ctx, s.store, orderID, userID, s.now())
	if err != nil {
		return nil, err
	}
	epochs, err := s.counter.Epochs(ctx, []int64{o.ProductID})
	if err != nil {
		return nil, err
	}
	out, err := s.store.CancelOrderRow(ctx, orderID, userID, s.now().UTC())
	if err != nil {
		return nil, err
	}
	s.giveBack(ctx, []int64{o.ProductID}, epochs, [][]*Order{{out}})
	s.rec.OrdersClosed(OrderCancelled, 1)
	return out, nil
}

// ExpireDue expires the reservations whose window ended by now, in rounds
// of up to commitMaxProducts products: the counters' epochs, one
// transaction that moves the due orders of every product of the round
// (Store.ExpireOrderRows), then each product's units back to its counter.
// It returns how many orders it expired. Every replica runs it
// (RunExpiry): the database's conditional move decides which replica
// expires which order, and only that one gives its unit back.
func (s *CounterSale) ExpireDue(ctx context.Context) (int, error) {
	return expireDue(ctx, s.store, s.now().UTC(), s.expireRound)
}

// expireRound expires the due orders of products, gives their units back
// to the counters, and then records when they came back (an upper bound:
// after the give-back).
func (s *CounterSale) expireRound(ctx context.Context, products []int64, now time.Time) int {
	epochs, err := s.counter.Epochs(ctx, products)
	if err != nil {
		s.log.Warn("expiry: read the counters' epochs", "products", len(products), "err", err)
		return 0
	}
	wctx, cancel := context.WithTimeout(ctx, batchWorkTimeout)
	defer cancel()
	expired, err := s.store.ExpireOrderRows(wctx, products, now)
	if err != nil {
		s.log.Warn("expiry", "products", len(products), "err", err)
		return 0
	}
	s.giveBack(ctx, products, epochs, expired)
	var ids []int64
	for _, os := range expired {
		for _, o := range os {
			ids = append(ids, o.ID)
		}
	}
	return markExpired(ctx, s.store, ids, s.now, s.rec, s.log)
}

// giveBack gives the units of orders, cancelled or expired by the
// database (orders[i] of products[i], whose counter had epochs[i] before
// the move), back to their counters. From the database's commit until
// each give-back returns, the units are counted in UnitsReturning: the
// units a crash here loses. The give-back goes on when ctx ends (a
// replica that stops gracefully finishes it); only ExpiryChaos's pause
// before it ends with ctx.
func (s *CounterSale) giveBack(ctx context.Context, products []int64, epochs []string, orders [][]*Order) {
	n := 0
	for _, os := range orders {
		n += len(os)
	}
	if n == 0 {
		return
	}
	s.crec.UnitsReturning(n)
	s.expiryChaos(ctx, products)
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orderWriteTimeout)
	defer cancel()
	for i, id := range products {
		if len(orders[i]) == 0 {
			continue
		}
		users := make([]string, len(orders[i]))
		for j, o := range orders[i] {
			users[j] = o.UserID
		}
		given, err := s.counter.GiveBack(gctx, id, epochs[i], users)
		s.crec.UnitsReturning(-len(users))
		switch {
		case err != nil:
			s.log.Error("units back in the database, not in the counter: lost to the sale",
				"product", id, "units", len(users), "err", err)
		case !given:
			s.log.Info("units given back to a counter built since their read: it has them from the database",
				"product", id, "units", len(users))
		}
	}
}

// RunExpiry runs ExpireDue every interval until ctx ends: this replica's
// expiry, as Service.RunExpiry.
func (s *CounterSale) RunExpiry(ctx context.Context, every time.Duration) {
	runExpiry(ctx, every, s.ExpireDue, s.log)
}
