package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The rest of a sale (docs/reservations.md). With Options.PayWindow set, a
// purchase reserves: its order is pending until the buyer pays (Pay) or
// cancels (Cancel) within the window, or the window passes and a replica
// expires it (ExpireDue). Each is one move out of pending, at most once:
// the store moves an order only WHERE it is still pending, in the
// transaction that moves its unit.
//
// A cancel and an expiry put the unit back in the stock, so they run
// under the product's lock and write only under its fence, like a
// purchase: a unit added to the stock outside the lock, between a
// purchase's read and its write-back of "the value read minus one", would
// be lost. A payment moves the unit from reserved to sold, which no
// purchase writes back, and takes no lock: the order's row decides
// between it and a racing cancel or expiry.

// UnsafeExpiry names a control of the expiry (Options.UnsafeExpiry).
type UnsafeExpiry string

// The expiry, safe, and its two controls.
const (
	ExpirySafe UnsafeExpiry = ""
	// ExpiryUnlocked adds the units back outside the lock and the fence:
	// it reads the product, moves its due orders, and then writes the
	// stock back as the value read plus their number, in a separate
	// statement (with the expiry's chaos pause between the read and the
	// write). A purchase between the two loses its decrement.
	ExpiryUnlocked UnsafeExpiry = "unlocked"
	// ExpiryUnchecked moves every due order of a product to expired, in
	// whatever state it is: paid and cancelled orders too, and expired
	// ones again, each putting a unit back.
	ExpiryUnchecked UnsafeExpiry = "unchecked"
)

// ParseUnsafeExpiry reads an UnsafeExpiry: "", "unlocked" or "unchecked".
func ParseUnsafeExpiry(s string) (UnsafeExpiry, error) {
	switch u := UnsafeExpiry(s); u {
	case ExpirySafe, ExpiryUnlocked, ExpiryUnchecked:
		return u, nil
	}
	return "", fmt.Errorf("unsafe expiry %q: want unlocked or unchecked, or nothing", s)
}

// newOrder is the order of userID for a product, made at now by the holder
// of token: pending until the payment window ends, or paid at once
// without a window.
func (s *Service) newOrder(productID int64, userID string, token int64, now time.Time) *Order {
	o := &Order{ProductID: productID, UserID: userID, Fence: token, CreatedAt: now, State: OrderPaid}
	if s.payWindow > 0 {
		o.State, o.ExpiresAt = OrderPending, now.Add(s.payWindow)
	}
	return o
}

// ValidateOrderID checks that id can name an order.
func ValidateOrderID(id int64) error {
	if id <= 0 {
		return Invalid("id", "must be a positive integer")
	}
	return nil
}

// validateMove checks the input of a payment or a cancel.
func validateMove(orderID int64, userID string) error {
	if err := ValidateOrderID(orderID); err != nil {
		return err
	}
	return ValidateUserID(userID)
}

// movable reads userID's order orderID and checks that it may move at
// now, so that a move that cannot happen is answered before a lock or
// Redis is asked; the store checks again when it writes the move.
func movable(ctx context.Context, orders interface {
	Order(ctx context.Context, id int64) (*Order, error)
}, orderID int64, userID string, now time.Time) (*Order, error) {
	if err := validateMove(orderID, userID); err != nil {
		return nil, err
	}
	o, err := orders.Order(ctx, orderID)
	if err != nil {
		return nil, err
	}
	if err := CheckMove(o, userID, now); err != nil {
		return nil, err
	}
	return o, nil
}

// Order returns one order.
func (c catalog) Order(ctx context.Context, id int64) (*Order, error) {
	if err := ValidateOrderID(id); err != nil {
		return nil, err
	}
	return c.store.Order(ctx, id)
}

// Pay pays for userID's pending order: it becomes paid, and its unit moves
// from the product's reserved count to its sold count, if the window has
// not passed by this replica's clock. The error matches ErrInvalid,
// ErrOrderNotFound, ErrNotYourOrder, ErrOrderPaid, ErrOrderCancelled or
// ErrOrderExpired, and then nothing changed.
func (s *Service) Pay(ctx context.Context, orderID int64, userID string) (*Order, error) {
	if err := validateMove(orderID, userID); err != nil {
		return nil, err
	}
	if s.payLate {
		o, err := s.unsafeLife.PayLate(ctx, orderID, userID, s.now().UTC())
		if err == nil {
			s.rec.OrdersClosed(OrderPaid, 1)
		}
		return o, err
	}
	return s.pays.pay(ctx, Payment{OrderID: orderID, UserID: userID})
}

// Cancel cancels userID's pending order: it becomes cancelled, and its
// unit goes back on sale, under the product's lock and fence. Errors as
// Pay's, and ErrBusy when the lock was not had in time or the fence moved
// on.
func (s *Service) Cancel(ctx context.Context, orderID int64, userID string) (*Order, error) {
	o, err := movable(ctx, s.store, orderID, userID, s.now())
	if err != nil {
		return nil, err
	}
	var out *Order
	err = s.locked(ctx, o.ProductID, func(ctx context.Context, token int64) error {
		var err error
		out, err = s.store.CancelOrder(ctx, orderID, userID, token, s.now().UTC())
		return s.fenced(FenceWrite, err)
	})
	if err != nil {
		return nil, err
	}
	s.rec.OrdersClosed(OrderCancelled, 1)
	return out, nil
}

// expiryWaiters bounds the products a pass waits for at once when their
// locks are held elsewhere.
const expiryWaiters = 8

// ExpireDue expires the reservations whose window ended by now, in rounds
// across products as purchases are served: each round tries the locks of
// up to commitMaxProducts products with due orders at once, and expires
// every product it holds in one transaction, each under its own fence.
// A product whose lock is held elsewhere is waited for in the lock's own
// queue (first come, first served), a few at once, so that a product whose
// purchases keep its lock busy is not passed over for good. It returns how
// many orders it expired. Every replica runs it (RunExpiry): two at once
// take turns at each product's lock, and the second finds nothing due.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	round := s.expireRound
	if s.unsafeExp == ExpiryUnlocked {
		round = s.expireUnlocked
	}
	return expireDue(ctx, s.store, s.now().UTC(), round)
}

// expireDue is every design's pass of expiry: it looks for the products
// with orders due by now and hands them to round, up to
// commitMaxProducts at a time; round expires what it can and says how
// many orders it expired. A product is handed over once per pass: one
// that round could not expire (its lock held elsewhere, a failed write)
// waits for the next pass.
func expireDue(ctx context.Context, store Store, now time.Time, round func(ctx context.Context, products []int64, now time.Time) int) (int, error) {
	tried := map[int64]bool{}
	total := 0
	for {
		// One look for many rounds' products: each look scans the due
		// orders' index up to now.
		due, err := store.DueProducts(ctx, now, dueLookMax)
		if err != nil {
			return total, err
		}
		var fresh []int64
		for _, id := range due {
			if !tried[id] {
				tried[id] = true
				fresh = append(fresh, id)
			}
		}
		if len(fresh) == 0 {
			return total, nil // every product due was tried
		}
		for len(fresh) > 0 {
			n := min(len(fresh), commitMaxProducts)
			total += round(ctx, fresh[:n], now)
			fresh = fresh[n:]
			if err := ctx.Err(); err != nil {
				return total, err
			}
		}
		if len(due) < dueLookMax {
			return total, nil
		}
	}
}

// dueLookMax is the most products one look for due orders returns.
const dueLookMax = 32 * commitMaxProducts

// heldProduct is a product whose lock an expiry holds.
type heldProduct struct {
	id   int64
	lock Lock
}

// expireRound expires the due orders of products: those whose locks it
// takes at once, in one transaction, and then each of the others once its
// lock comes.
func (s *Service) expireRound(ctx context.Context, products []int64, now time.Time) int {
	names := make([]string, len(products))
	for i, id := range products {
		names[i] = LockName(id)
	}
	locks, errs := s.locker.TryAcquireAll(ctx, names)
	var held []heldProduct
	var elsewhere []int64
	for i, id := range products {
		switch {
		case errs[i] == nil:
			held = append(held, heldProduct{id, locks[i]})
		case errors.Is(errs[i], ErrBusy):
			elsewhere = append(elsewhere, id)
		default:
			s.log.Warn("expiry: lock", "lock", names[i], "err", errs[i])
		}
	}
	n := s.expireHeld(ctx, held, now)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, expiryWaiters)
	for _, id := range elsewhere {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lk, err := s.locker.Acquire(ctx, LockName(id))
			if err != nil {
				return // the next pass tries again
			}
			k := s.expireHeld(ctx, []heldProduct{{id, lk}}, now)
			mu.Lock()
			n += k
			mu.Unlock()
		})
	}
	wg.Wait()
	return n
}

// expireHeld expires the due orders of products whose locks it holds, in
// one transaction, releases the locks, and records when the orders came
// back (Store.MarkClosed) once that transaction has committed.
func (s *Service) expireHeld(ctx context.Context, held []heldProduct, now time.Time) int {
	if len(held) == 0 {
		return 0
	}
	locks := make([]Lock, len(held))
	claims := make([]Claim, len(held))
	products := make([]int64, len(held))
	for i, h := range held {
		locks[i], products[i] = h.lock, h.id
		claims[i] = Claim{ProductID: h.id, Token: h.lock.Token()}
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		for i, err := range s.locker.ReleaseAll(rctx, locks) {
			if err != nil {
				s.log.Warn("expiry: lock release", "lock", LockName(held[i].id), "err", err)
			}
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, batchWorkTimeout)
	defer cancel()
	expire := s.store.ExpireAll
	if s.unsafeExp == ExpiryUnchecked {
		expire = s.unsafeLife.ExpireAllUnchecked
	}
	s.rec.ExpiriesInProgress(len(held))
	s.expiryChaos(wctx, products)
	expired, refused, err := expire(wctx, claims, now)
	s.rec.ExpiriesInProgress(-len(held))
	if err != nil {
		s.log.Warn("expiry", "products", len(held), "err", err)
		return 0
	}
	var ids []int64
	for i := range held {
		if refused[i] != nil {
			_ = s.fenced(FenceWrite, refused[i])
			continue
		}
		ids = append(ids, expired[i]...)
	}
	return markExpired(ctx, s.store, ids, s.now, s.rec, s.log)
}

// markExpired records when the orders ids, whose expiry has committed,
// came back (Store.MarkClosed), counts them, and returns how many.
func markExpired(ctx context.Context, store Store, ids []int64, now func() time.Time, rec Recorder, log *slog.Logger) int {
	if len(ids) == 0 {
		return 0
	}
	if err := store.MarkClosed(context.WithoutCancel(ctx), ids, now()); err != nil {
		log.Warn("expiry: record when the orders expired", "orders", len(ids), "err", err)
	}
	rec.OrdersClosed(OrderExpired, len(ids))
	return len(ids)
}

// expireUnlocked is the control ExpiryUnlocked: for each product, no lock,
// no fence, and the stock written back as the value read plus the units
// returned.
func (s *Service) expireUnlocked(ctx context.Context, products []int64, now time.Time) int {
	n := 0
	for _, id := range products {
		p, err := s.store.Product(ctx, id)
		if err != nil {
			continue
		}
		ids, err := s.unsafeLife.ExpireOrders(ctx, id, now)
		if err != nil || len(ids) == 0 {
			continue
		}
		s.rec.ExpiriesInProgress(1)
		s.expiryChaos(ctx, []int64{id})
		if err := s.setStock.SetStock(ctx, id, p.Stock+int64(len(ids))); err != nil {
			s.log.Warn("unlocked expiry: write the stock back", "product", id, "err", err)
		}
		s.rec.ExpiriesInProgress(-1)
		if err := s.store.MarkClosed(ctx, ids, s.now()); err != nil {
			s.log.Warn("expiry: record when the orders expired", "orders", len(ids), "err", err)
		}
		s.rec.OrdersClosed(OrderExpired, len(ids))
		n += len(ids)
	}
	return n
}

// RunExpiry runs ExpireDue every interval until ctx ends: the expiry of
// this replica. Every replica runs one; there is no coordinator. A pass
// that fails is logged, and the next one tries again.
func (s *Service) RunExpiry(ctx context.Context, every time.Duration) {
	runExpiry(ctx, every, s.ExpireDue, s.log)
}

// runExpiry calls expire every interval until ctx ends.
func runExpiry(ctx context.Context, every time.Duration, expire func(context.Context) (int, error), log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := expire(ctx); err != nil && ctx.Err() == nil {
			log.Warn("expiry pass", "err", err)
		}
	}
}

// Pay, for a design whose orders are final at once (redis-counter-async,
// which has no payment window): an order is paid when it is made, so
// there is nothing to pay; the error says which state the order is in.
func (c catalog) Pay(ctx context.Context, orderID int64, userID string) (*Order, error) {
	return nil, c.finalMove(ctx, orderID, userID)
}

// Cancel, for a design whose orders are final at once: as Pay.
func (c catalog) Cancel(ctx context.Context, orderID int64, userID string) (*Order, error) {
	return nil, c.finalMove(ctx, orderID, userID)
}

// finalMove is the answer to a payment or a cancel of an order that cannot
// be pending: ErrOrderPaid (or another rule's error).
func (c catalog) finalMove(ctx context.Context, orderID int64, userID string) error {
	if err := validateMove(orderID, userID); err != nil {
		return err
	}
	o, err := c.store.Order(ctx, orderID)
	if err != nil {
		return err
	}
	if err := CheckMove(o, userID, time.Now()); err != nil {
		return err
	}
	return fmt.Errorf("order %d is pending, and this design cannot move it", orderID)
}
