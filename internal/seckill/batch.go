package seckill

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// purchaseQueue holds one product's waiting purchases. Guarded by
// batcher.mu.
type purchaseQueue struct {
	waiting []*purchaseCall // arrival order; waiting[0] leads when leading is set
	leading bool
}

// purchaseCall is one purchase in a queue.
type purchaseCall struct {
	ctx      context.Context
	userID   string
	deadline time.Time
	state    callState       // guarded by batcher.mu
	done     chan callResult // capacity 1: the answer, or the lead
}

type callState int

const (
	callQueued  callState = iota // waiting for its batch
	callLeading                  // at the head: takes the lock for the next batch
	callBatched                  // taken into a batch; its answer comes on done
)

type callResult struct {
	order *Order
	err   error
	lead  bool // not an answer: the call now leads its queue
}

// batcher is the queues of the products being bought in this process.
type batcher struct {
	mu     sync.Mutex
	queues map[int64]*purchaseQueue
}

// enqueue adds c to the product's queue. lead is true when c found no
// leader and so leads at once; a full queue refuses c with ErrBusy.
func (b *batcher) enqueue(productID int64, c *purchaseCall, max int) (q *purchaseQueue, lead bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q = b.queues[productID]
	if q == nil {
		q = &purchaseQueue{}
		b.queues[productID] = q
	}
	if len(q.waiting) >= max {
		return nil, false, fmt.Errorf("product %d: %d purchases already wait: %w", productID, len(q.waiting), ErrBusy)
	}
	q.waiting = append(q.waiting, c)
	if !q.leading {
		q.leading, c.state = true, callLeading
	}
	return q, c.state == callLeading, nil
}

// leave takes a queued c out of q, for a purchase that stops waiting. It
// reports false when c is already batched or leading: its answer (or the
// lead) is then on its way.
func (b *batcher) leave(q *purchaseQueue, c *purchaseCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.state != callQueued {
		return false
	}
	q.remove(c)
	return true
}

// take removes up to max purchases from the head of q and marks them
// batched. Those whose context has ended are left out and answered
// ErrBusy (the leader's own, with the others, is returned in gone).
func (b *batcher) take(q *purchaseQueue, leader *purchaseCall, max int) (batch []*purchaseCall, leaderGone error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for n < len(q.waiting) && len(batch) < max {
		c := q.waiting[n]
		n++
		if err := c.ctx.Err(); err != nil {
			err = fmt.Errorf("the buyer left before the purchase was made: %w: %w", ErrBusy, err)
			if c == leader {
				leaderGone = err
			} else {
				c.state = callBatched
				c.done <- callResult{err: err}
			}
			continue
		}
		c.state = callBatched
		batch = append(batch, c)
	}
	q.waiting = q.waiting[n:]
	return batch, leaderGone
}

// handOn passes the lead of q to the purchase at its head, or forgets q
// when nobody waits. leader is the call that led, taken out of q if it is
// still there (its lock was not acquired).
func (b *batcher) handOn(productID int64, q *purchaseQueue, leader *purchaseCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q.remove(leader)
	if len(q.waiting) == 0 {
		q.leading = false
		if b.queues[productID] == q {
			delete(b.queues, productID)
		}
		return
	}
	next := q.waiting[0]
	next.state = callLeading
	next.done <- callResult{lead: true}
}

func (q *purchaseQueue) remove(c *purchaseCall) {
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return
		}
	}
}

// purchaseBatched is Purchase's steps 3 to 7 with group commit.
func (s *Service) purchaseBatched(ctx context.Context, productID int64, userID string) (*Order, error) {
	c := &purchaseCall{ctx: ctx, userID: userID, deadline: time.Now().Add(s.wait), done: make(chan callResult, 1)}
	q, lead, err := s.batch.enqueue(productID, c, s.queueMax)
	if err != nil {
		return nil, err
	}
	if !lead {
		res := s.await(ctx, q, c)
		if !res.lead {
			return res.order, res.err
		}
	}
	return s.lead(ctx, productID, q, c)
}

// await waits for c's answer or its lead, for at most its wait.
func (s *Service) await(ctx context.Context, q *purchaseQueue, c *purchaseCall) callResult {
	t := time.NewTimer(time.Until(c.deadline))
	defer t.Stop()
	var cause error
	select {
	case res := <-c.done:
		return res
	case <-ctx.Done():
		cause = ctx.Err()
	case <-t.C:
		cause = context.DeadlineExceeded
	}
	if s.batch.leave(q, c) {
		return callResult{err: fmt.Errorf("no turn within %v: %w: %w", s.wait, ErrBusy, cause)}
	}
	// Batched or just given the lead: the answer is on its way, bounded by
	// one batch's work (or, for a lead, by the deadline that has passed).
	return <-c.done
}

// lead takes the product's lock for the queue, serves one batch, answers
// it, and hands the lead on. The lock is taken for every buyer in the
// batch, so the leader's own cancellation does not stop it; its wait is
// the oldest in the queue, and bounds the lock's.
func (s *Service) lead(ctx context.Context, productID int64, q *purchaseQueue, c *purchaseCall) (*Order, error) {
	defer s.batch.handOn(productID, q, c)
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.deadline)
	defer cancel()
	lease, err := s.locker.Acquire(actx, LockName(productID))
	if err != nil {
		return nil, err
	}
	defer s.release(ctx, productID, lease)

	batch, leaderGone := s.batch.take(q, c, s.batchMax)
	answered := false
	defer func() {
		// Only a panic gets here with the batch unanswered: its buyers
		// must not wait for an answer that will never come.
		if answered {
			return
		}
		for _, bc := range batch {
			if bc != c {
				bc.done <- callResult{err: errBatchAborted}
			}
		}
	}()
	wctx, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), batchWorkTimeout)
	defer cancelWork()
	results := s.serveBatch(wctx, productID, lease.Token(), batch)
	var mine callResult
	for i, bc := range batch {
		if bc == c {
			mine = results[i]
			continue
		}
		bc.done <- results[i]
	}
	answered = true
	if leaderGone != nil {
		return nil, leaderGone
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
	s.chaos(ctx)
	// Step 6, once: every order and the stock left, fenced.
	if err := s.fenced(FenceWrite, s.store.PlaceOrders(ctx, productID, token, stock, orders)); err != nil {
		return fail(err)
	}
	return results
}
