package seckill

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseTimeout bounds a release that runs after the request's context
// ended (the client went away). If it fails, the lease's TTL frees the lock.
const releaseTimeout = 2 * time.Second

// Purchase sells one item of a product to a user, following the steps in
// the package doc. The error matches ErrInvalid, ErrNotFound, ErrSoldOut,
// ErrAlreadyPurchased or ErrBusy (ErrFenceRejected when a newer holder took
// over), or is an unexpected failure of the lock service or the database.
func (s *Service) Purchase(ctx context.Context, productID int64, userID string) (order *Order, err error) {
	start := s.now()
	defer func() { s.rec.PurchaseDone(OutcomeOf(err), s.now().Sub(start)) }()

	// Step 1.
	if err := validatePurchase(productID, userID); err != nil {
		return nil, err
	}
	// Step 2: the fast paths, from the shared database (package doc).
	if _, err := s.available(ctx, productID, userID); err != nil {
		return nil, err
	}
	if s.batchMax > 1 && s.unfenced == nil {
		return s.purchaseBatched(ctx, productID, userID)
	}
	// Steps 3 and 7.
	err = s.locked(ctx, productID, func(ctx context.Context, token int64) error {
		var lerr error
		order, lerr = s.purchaseLocked(ctx, productID, userID, token)
		return lerr
	})
	if err != nil {
		return nil, err
	}
	return order, nil
}

// purchaseLocked is the critical section: steps 4 to 6, or the unfenced
// sequence (see the package doc) when the Service is unfenced.
func (s *Service) purchaseLocked(ctx context.Context, productID int64, userID string, token int64) (*Order, error) {
	// Steps 4 and 5. The claim comes before the read so that the read sees
	// every write an earlier holder got accepted.
	var p *Product
	var bought map[string]bool
	var err error
	if s.unfenced != nil {
		p, bought, err = s.store.ProductAndBuyers(ctx, productID, []string{userID})
	} else {
		p, bought, err = s.claimAndRead(ctx, productID, token, []string{userID})
	}
	if err != nil {
		return nil, err
	}
	if err := purchaseRule(productID, userID, bought[userID], p.Stock); err != nil {
		return nil, err
	}

	o := s.newOrder(productID, userID, token, s.now().UTC())
	if s.unfenced == nil {
		s.chaos(ctx, []int64{productID})
		// Step 6: the stock read in step 5 minus one, fenced.
		if err := s.fenced(FenceWrite, s.store.PlaceOrders(ctx, productID, token, p.Stock-1, []*Order{o})); err != nil {
			return nil, err
		}
		return o, nil
	}
	// The unfenced sequence: insert the order, then write back the stock
	// read minus one in a separate statement. Safe only if nobody else read the
	// same stock meanwhile. The chaos hook sits between the two writes.
	if err := s.unfenced.InsertOrder(ctx, o); err != nil {
		return nil, err
	}
	s.chaos(ctx, []int64{productID})
	if err := s.unfenced.SetStock(ctx, productID, p.Stock-1); err != nil {
		return nil, err
	}
	return o, nil
}

// locked runs fn while holding the product's lock, and releases the lock
// however fn ends, as the unfenced sequence's finally block does.
func (s *Service) locked(ctx context.Context, productID int64, fn func(ctx context.Context, token int64) error) error {
	lease, err := s.locker.Acquire(ctx, LockName(productID))
	if err != nil {
		return err
	}
	defer s.release(ctx, productID, lease)
	return fn(ctx, lease.Token())
}

// release gives the product's lock up, also when the request's context is
// over.
func (s *Service) release(ctx context.Context, productID int64, lease Lock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := lease.Release(rctx); err != nil {
		// Nothing to undo: with fencing on, a holder whose lease ran out
		// could not write after its successor's claim; with it off, this
		// is the warning that the critical section may not have been
		// exclusive.
		s.log.Warn("lock release", "lock", LockName(productID), "token", lease.Token(), "err", err)
	}
}

// available is step 2: it reads the product and the buyer's order, in a
// read shared with the other buyers of the product waiting for one
// (reads.go), and applies the rules of a purchase: the buyer has no order
// for it yet (checked first, so that a buyer who has one hears so even
// once the stock is gone), and it is in stock. Step 5 checks again under
// the lock.
func (s *Service) available(ctx context.Context, productID int64, userID string) (*Product, error) {
	p, bought, err := s.read(ctx, productID, userID)
	if err != nil {
		return nil, err
	}
	if err := purchaseRule(productID, userID, bought, p.Stock); err != nil {
		return nil, err
	}
	return p, nil
}

// purchaseRule is the rule of a purchase, applied to what was read: a
// buyer who has an order hears so (even once the stock is gone, since
// that answer cannot go stale), and otherwise there must be stock left.
// Both the one-at-a-time path and a batch decide with it.
func purchaseRule(productID int64, userID string, bought bool, stock int64) error {
	if bought {
		return fmt.Errorf("product %d, user %q: %w", productID, userID, ErrAlreadyPurchased)
	}
	if stock <= 0 {
		return fmt.Errorf("product %d: %w", productID, ErrSoldOut)
	}
	return nil
}

// claim is step 4.
func (s *Service) claim(ctx context.Context, productID, token int64) error {
	return s.fenced(FenceClaim, s.store.ClaimFence(ctx, productID, token))
}

// claimAndRead is steps 4 and 5: the claim, then the product and which of
// users have an order for it.
func (s *Service) claimAndRead(ctx context.Context, productID, token int64, users []string) (*Product, map[string]bool, error) {
	p, bought, err := s.store.ClaimAndRead(ctx, productID, token, users)
	if err != nil {
		return nil, nil, s.fenced(FenceClaim, err)
	}
	return p, bought, nil
}

// fenced records a fence's refusal and passes err on.
func (s *Service) fenced(stage FenceStage, err error) error {
	if errors.Is(err, ErrFenceRejected) {
		s.rec.FenceRejected(stage)
	}
	return err
}
