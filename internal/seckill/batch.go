package seckill

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Group commit: concurrent purchases of one product in one process are
// served in batches, one batch per lock hold.
//
//	N buyers ──queue──▶ leader: lock ─ claim fence ─ read ─ decide each ─ one transaction ─ release
//	                                             (stock, sold, N orders)
//
// The purchases queue per product, in arrival order. The oldest one leads:
// its product's batch goes into a round of the commit line (commit.go),
// which holds the product's lock for it, takes up to BatchMax purchases
// from the head (the leader first), claims the fence once, reads the
// product and the buyers' earlier orders once, applies the same rule as
// the reference path (purchaseRule) to each purchase in order, as if they
// had come one at a time, and writes every order of the batch with the
// new stock in one fenced write, all with the other products of the round.
// Then it answers each purchase and releases the lock, and the leader
// hands the lead to the purchase now at the head. A purchase waits for its
// turn at most Options.Wait (then ErrBusy), and a queue longer than
// Options.QueueMax turns newcomers away at once (ErrBusy).
//
// A purchase whose context ends before its batch is formed leaves the
// queue and is not sold (ErrBusy, with the context's error). Once taken
// into a batch, it is decided and written with the others: the batch's
// work does not depend on any one buyer still listening, and its answer
// is the order that was made.

// purchaseCall is one purchase in a queue.
type purchaseCall struct {
	seat[callResult]
	ctx      context.Context
	userID   string
	deadline time.Time
}

type callResult struct {
	order *Order
	err   error
}

// batcher is the line of this process's purchases (line.go).
type batcher = line[*purchaseCall, callResult]

// purchaseBatched is Purchase's steps 3 to 7 with group commit.
func (s *Service) purchaseBatched(ctx context.Context, productID int64, userID string) (*Order, error) {
	c := &purchaseCall{seat: newSeat[callResult](), ctx: ctx, userID: userID, deadline: time.Now().Add(s.wait)}
	q, lead, ok := s.batch.join(productID, c, s.queueMax)
	if !ok {
		return nil, fmt.Errorf("product %d: %d purchases already wait: %w", productID, s.queueMax, ErrBusy)
	}
	if !lead {
		t := time.NewTimer(time.Until(c.deadline))
		defer t.Stop()
		// Once batched, the answer comes within one batch's work
		// (batchWorkTimeout); a lead is already there.
		turn, left := s.batch.wait(ctx, q, c, t.C)
		if left != nil {
			return nil, fmt.Errorf("no turn within %v: %w: %w", s.wait, ErrBusy, left)
		}
		if !turn.lead {
			return turn.answer.order, turn.answer.err
		}
	}
	return s.lead(ctx, productID, q, c)
}

// lead serves the product's queue once: it asks the commit line for a
// round (commit.go), which tries the product's lock with the other
// products' of its round, takes the queue's purchases (up to BatchMax,
// the oldest first) and serves them. When another process holds the lock,
// lead waits for it in the lock's queue, for the oldest purchase's wait
// at most, and asks again, holding it. Then it hands the lead on. The lock
// is waited for on behalf of every buyer in the queue, so the leader's own
// cancellation does not stop the wait.
func (s *Service) lead(ctx context.Context, productID int64, q *queue[*purchaseCall], c *purchaseCall) (*Order, error) {
	defer s.batch.handOn(productID, q, c)
	var lk Lock
	for {
		r := s.commit(ctx, &holdCall{seat: newSeat[holdResult](), productID: productID, q: q, leader: c, lock: lk})
		if !r.heldElsewhere {
			return r.mine.order, r.mine.err
		}
		actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.deadline)
		var err error
		lk, err = s.locker.Acquire(actx, LockName(productID))
		cancel()
		if err != nil {
			return nil, err
		}
	}
}

// errBatchAborted answers the buyers of a batch whose leader panicked.
var errBatchAborted = errors.New("seckill: the batch was aborted")

// batchWorkTimeout bounds a batch's database work once the lock is held.
// A batch that overruns it fails as a whole; the fence keeps a write that
// outlived the lease from landing.
const batchWorkTimeout = 10 * time.Second
