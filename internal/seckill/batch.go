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
//	N buyers ──queue──▶ leader: Acquire ─ claim fence ─ read ─ decide each ─ one transaction ─ Release
//	                                              (stock, sold, N orders)
//
// The purchases queue per product, in arrival order. The oldest one leads:
// it takes the product's lock for the queue, takes up to BatchMax purchases
// from the head (itself first), claims the fence once, reads the product
// and the buyers' earlier orders once, applies the same rule as the
// reference path (purchaseRule) to each purchase in order, as if they had
// come one at a time, and writes every order of the batch with the new
// stock in one fenced transaction. Then it answers each purchase, releases
// the lock, and hands the lead to the purchase now at the head. A purchase
// waits for its turn at most Options.Wait (then ErrBusy), and a queue
// longer than Options.QueueMax turns newcomers away at once (ErrBusy).
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

// lead takes the product's lock for the queue, serves one batch, answers
// it, and hands the lead on. The lock is taken for every buyer in the
// batch, so the leader's own cancellation does not stop it; its wait is
// the oldest in the queue, and bounds the lock's.
func (s *Service) lead(ctx context.Context, productID int64, q *queue[*purchaseCall], c *purchaseCall) (*Order, error) {
	defer s.batch.handOn(productID, q, c)
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.deadline)
	defer cancel()
	lease, err := s.locker.Acquire(actx, LockName(productID))
	if err != nil {
		return nil, err
	}
	defer s.release(ctx, productID, lease)

	// Purchases whose buyer left before their batch was formed are not
	// sold; the others are, whoever still listens.
	batch, refusal, ok := s.batch.take(q, c, s.batchMax, func(bc *purchaseCall) (callResult, bool) {
		if err := bc.ctx.Err(); err != nil {
			return callResult{err: fmt.Errorf("the buyer left before the purchase was made: %w: %w", ErrBusy, err)}, false
		}
		return callResult{}, true
	})
	mine := serveTaken(batch, c, callResult{err: errBatchAborted}, func() []callResult {
		wctx, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), batchWorkTimeout)
		defer cancelWork()
		return s.serveBatch(wctx, productID, lease.Token(), batch)
	})
	if !ok {
		return nil, refusal.err
	}
	return mine.order, mine.err
}

// errBatchAborted answers the buyers of a batch whose leader panicked.
var errBatchAborted = errors.New("seckill: the batch was aborted")

// batchWorkTimeout bounds a batch's database work once the lock is held.
// A batch that overruns it fails as a whole; the fence keeps a write that
// outlived the lease from landing.
const batchWorkTimeout = 10 * time.Second

// serveBatch is steps 4 to 6 for a batch: claim the fence, read the
// product and which buyers already have an order, decide each purchase in
// order, and write the orders with the new stock in one transaction. A
// refused fence, or any failure before or during the write, fails the
// whole batch; nothing of it is then written.
func (s *Service) serveBatch(ctx context.Context, productID, token int64, batch []*purchaseCall) []callResult {
	results := make([]callResult, len(batch))
	if len(batch) == 0 {
		return results
	}
	s.rec.BatchDone(len(batch))
	fail := func(err error) []callResult {
		for i := range results {
			results[i] = callResult{err: err}
		}
		return results
	}
	// Steps 4 and 5, once for the batch: the claim, then the product and
	// every buyer's earlier order.
	users := make([]string, len(batch))
	for i, c := range batch {
		users[i] = c.userID
	}
	p, bought, err := s.claimAndRead(ctx, productID, token, users)
	if err != nil {
		return fail(err)
	}
	// Each purchase in arrival order, as if one at a time: a buyer who won
	// earlier in the batch has bought, and each sale takes one item.
	stock := p.Stock
	now := s.now().UTC()
	var orders []*Order
	for i, c := range batch {
		if err := purchaseRule(productID, c.userID, bought[c.userID], stock); err != nil {
			results[i].err = err
			continue
		}
		bought[c.userID] = true
		stock--
		o := &Order{ProductID: productID, UserID: c.userID, Fence: token, CreatedAt: now}
		results[i].order = o
		orders = append(orders, o)
	}
	if len(orders) == 0 {
		return results
	}
	s.chaos(ctx, []int64{productID})
	// Step 6, once: every order and the stock left, fenced.
	if err := s.fenced(FenceWrite, s.store.PlaceOrders(ctx, productID, token, stock, orders)); err != nil {
		return fail(err)
	}
	return results
}
