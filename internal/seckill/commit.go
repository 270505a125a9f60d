package seckill

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Group commit across products: the batches of one process, whatever
// their products, are served in rounds, one round for every product whose
// batch waits.
//
//	product leaders ──queue──▶ round: TryAcquireAll ─ take each batch ─ ClaimAndReadAll ─ decide each ─ PlaceOrdersAll ─ answer each ─ ReleaseAll
//
// Each product's purchases queue per product (batch.go), and the oldest
// leads that product: it asks the commit line for a round. The oldest of
// the requests waiting leads one: it takes them all (up to
// commitMaxProducts), and hands the lead on when its round ends, or once
// the round has been at work for commitOverlapAfter, whichever comes
// first: the requests that came meanwhile then form the next round. It
// tries every one of their locks at once, waiting for
// none (Locker.TryAcquireAll: one round trip), takes each locked product's
// purchases from its queue (up to BatchMax), claims every product's fence
// and reads the products and their buyers' orders (Store.ClaimAndReadAll:
// one round trip), decides every purchase by purchaseRule, in arrival
// order, writes every product's orders and stock (Store.PlaceOrdersAll:
// one transaction, each product fenced on its own), answers every
// purchase and releases every lock at once (Locker.ReleaseAll). When a
// flash sale's demand is spread over thousands of products, a batch is one
// or two buyers, and a round is what amortizes the lock's and the
// database's round trips over many of them.
//
// A product whose lock another process holds takes no part in the round:
// its leader waits for the lock in the lock's own queue (Locker.Acquire,
// first come, first served) and asks again, holding it, and the next round
// serves it without trying. A round waits for no lock, so it never holds
// one while it waits for another: no deadlock.
//
// The fence argument (doc.go) holds product by product: each claim is its
// product's own, the reads come after every claim of the round, and each
// product's write is refused alone when a newer holder has claimed its
// fence since. A refused claim or write fails that product's batch and no
// other's.

// commitsKey is the one queue of the commit line: every product's.
const commitsKey = 0

// commitMaxProducts is the most products one round serves: a bound on the
// statements of its transactions.
const commitMaxProducts = 128

// A round that is slow (a stalled holder, a slow statement, a lost round
// trip) must hold up its own products only: after commitOverlapAfter, the
// next round, of the products that came meanwhile, starts beside it, up to
// commitRounds rounds at once. Not before: a round that waits for the one
// before it to end takes all that came meanwhile, and the fewer the rounds,
// the fewer the lock and database round trips they pay. A product is in
// one round at a time (its queue has one leader), and a round waits for no
// lock, so rounds at once cannot deadlock.
const (
	commitOverlapAfter = 100 * time.Millisecond
	commitRounds       = 4
)

// holdCall is a product's request for a round: its queue and its leader,
// and its lock, when the leader waited for it.
type holdCall struct {
	seat[holdResult]
	productID int64
	q         *queue[*purchaseCall]
	leader    *purchaseCall
	lock      Lock
}

// holdResult is a round's answer to a product: its leader's own answer
// (its other purchases are answered by the round), or that another
// process holds the lock.
type holdResult struct {
	heldElsewhere bool
	mine          callResult
}

// commits is the line of this process's rounds (line.go).
type commits = line[*holdCall, holdResult]

// commit asks for a round for h's product and returns its answer: it
// leads the round, or waits for the one that takes it. A request waits
// for its round whatever the buyer's context: it serves the product's
// other buyers too, and a round is bounded by batchWorkTimeout.
func (s *Service) commit(ctx context.Context, h *holdCall) holdResult {
	q, lead, _ := s.commits.join(commitsKey, h, unbounded)
	if !lead {
		t, _ := s.commits.wait(context.WithoutCancel(ctx), q, h, nil)
		if !t.lead {
			return t.answer
		}
	}
	s.rounds <- struct{}{}
	defer func() { <-s.rounds }()
	holds, _, _ := s.commits.take(q, h, commitMaxProducts, nil)
	var once sync.Once
	handOn := func() { once.Do(func() { s.commits.handOn(commitsKey, q, h) }) }
	overlap := time.AfterFunc(commitOverlapAfter, handOn)
	defer func() {
		overlap.Stop()
		handOn()
	}()
	return serveTaken(holds, h, holdResult{mine: callResult{err: errBatchAborted}}, func() []holdResult {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchWorkTimeout)
		defer cancel()
		return s.serveRound(wctx, holds)
	})
}

// productBatch is one product's part of a round: its request, the
// purchases taken from its queue, and their answers.
type productBatch struct {
	hold    *holdCall
	calls   []*purchaseCall
	results []callResult
}

// serveRound serves a round: it takes the locks of the products that do
// not hold theirs, serves the batches of those it holds, answers every
// purchase but the product leaders', whose answers it returns, and
// releases every lock.
func (s *Service) serveRound(ctx context.Context, holds []*holdCall) []holdResult {
	results := make([]holdResult, len(holds))
	var names []string
	var tried []int
	for i, h := range holds {
		if h.lock == nil {
			names = append(names, LockName(h.productID))
			tried = append(tried, i)
		}
	}
	if len(names) > 0 {
		locks, errs := s.locker.TryAcquireAll(ctx, names)
		for j, i := range tried {
			switch {
			case errs[j] == nil:
				holds[i].lock = locks[j]
			case errors.Is(errs[j], ErrBusy):
				results[i].heldElsewhere = true
			default:
				results[i].mine = callResult{err: errs[j]}
			}
		}
	}
	var held []*holdCall
	for _, h := range holds {
		if h.lock != nil {
			held = append(held, h)
		}
	}
	// Every lock held is released when the round ends, however it ends.
	defer s.releaseAll(ctx, held)

	batches := make([]*productBatch, 0, len(held))
	answered := false
	defer func() {
		if answered {
			return
		}
		// The round panicked: none of its buyers may wait for an answer
		// that will never come.
		for _, b := range batches {
			for _, c := range b.calls {
				if c != b.hold.leader {
					answer(c, callResult{err: errBatchAborted})
				}
			}
		}
	}()
	for i, h := range holds {
		if h.lock == nil {
			continue
		}
		// Purchases whose buyer left before their batch was formed are
		// not sold; the others are, whoever still listens.
		calls, refusal, ok := s.batch.take(h.q, h.leader, s.batchMax, func(bc *purchaseCall) (callResult, bool) {
			if err := bc.ctx.Err(); err != nil {
				return callResult{err: fmt.Errorf("the buyer left before the purchase was made: %w: %w", ErrBusy, err)}, false
			}
			return callResult{}, true
		})
		if !ok {
			results[i].mine = refusal
		}
		batches = append(batches, &productBatch{hold: h, calls: calls, results: make([]callResult, len(calls))})
	}
	s.serveBatches(ctx, batches)
	at := make(map[*holdCall]int, len(holds))
	for i, h := range holds {
		at[h] = i
	}
	for _, b := range batches {
		for j, c := range b.calls {
			if c == b.hold.leader {
				results[at[b.hold]].mine = b.results[j]
			} else {
				answer(c, b.results[j])
			}
		}
	}
	answered = true
	return results
}

// serveBatches is steps 4 to 6 for every batch of a round: claim each
// product's fence, read the products and which buyers already have an
// order, decide each purchase in order, and write every product's orders
// with its new stock in one transaction. A refused claim or write, or a
// failure of one product's write, fails its product's batch alone; a
// failure of a whole call fails every batch as busy: nothing of a failed
// batch is written, and no buyer gets a final answer it did not earn.
func (s *Service) serveBatches(ctx context.Context, batches []*productBatch) {
	var claims []Claim
	var claiming []*productBatch
	for _, b := range batches {
		if len(b.calls) == 0 {
			continue
		}
		s.rec.BatchDone(len(b.calls))
		users := make([]string, len(b.calls))
		for i, c := range b.calls {
			users[i] = c.userID
		}
		claims = append(claims, Claim{ProductID: b.hold.productID, Token: b.hold.lock.Token(), UserIDs: users})
		claiming = append(claiming, b)
	}
	if len(claims) == 0 {
		return
	}
	fail := func(b *productBatch, err error) {
		for i := range b.results {
			b.results[i] = callResult{err: err}
		}
	}
	// Steps 4 and 5, once for the round: every claim, then every product
	// and every buyer's earlier order.
	claimed, err := s.store.ClaimAndReadAll(ctx, claims)
	if err != nil {
		for _, b := range claiming {
			fail(b, retryable(err))
		}
		return
	}
	now := s.now().UTC()
	var placements []Placement
	var placing []*productBatch
	var products []int64
	for i, b := range claiming {
		if claimed[i].Err != nil {
			fail(b, s.fenced(FenceClaim, claimed[i].Err))
			continue
		}
		// Each purchase in arrival order, as if one at a time: a buyer who
		// won earlier in the batch has bought, and each sale takes one item.
		productID, token := b.hold.productID, b.hold.lock.Token()
		bought, stock := claimed[i].Bought, claimed[i].Product.Stock
		var orders []*Order
		for j, c := range b.calls {
			if err := purchaseRule(productID, c.userID, bought[c.userID], stock); err != nil {
				b.results[j].err = err
				continue
			}
			bought[c.userID] = true
			stock--
			o := s.newOrder(productID, c.userID, token, now)
			b.results[j].order = o
			orders = append(orders, o)
		}
		if len(orders) > 0 {
			placements = append(placements, Placement{ProductID: productID, Token: token, NewStock: stock, Orders: orders})
			placing = append(placing, b)
			products = append(products, productID)
		}
	}
	if len(placements) == 0 {
		return
	}
	s.chaos(ctx, products)
	// Step 6, once: every product's orders and stock, each fenced.
	refused, err := s.store.PlaceOrdersAll(ctx, placements)
	for i, b := range placing {
		switch {
		case err != nil:
			fail(b, retryable(err))
		case errors.Is(refused[i], ErrFenceRejected):
			fail(b, s.fenced(FenceWrite, refused[i]))
		case refused[i] != nil:
			// The product's own failure, such as an order of one of its
			// buyers that another writer of the database inserted since
			// the read: its batch alone wrote nothing.
			fail(b, retryable(refused[i]))
		}
	}
}

// retryable is the answer to the buyers of a batch that a failure not of
// their making left undecided: a failed call of the whole round, or a
// duplicate order inserted by another writer among the batch's buyers.
// Nothing of the batch was written, so each may retry, and a retry decides
// again from what is then in the database (where a buyer who does have an
// order hears so). It matches ErrBusy and none of the rules' errors: a
// failure that is no answer about a buyer must not read as a final one.
func retryable(err error) error {
	if errors.Is(err, ErrBusy) {
		return err
	}
	return fmt.Errorf("%w: nothing of the batch was written: %v", ErrBusy, err)
}

// releaseAll gives every lock of holds up, also when the round's context
// is over.
func (s *Service) releaseAll(ctx context.Context, holds []*holdCall) {
	if len(holds) == 0 {
		return
	}
	locks := make([]Lock, len(holds))
	for i, h := range holds {
		locks[i] = h.lock
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	for i, err := range s.locker.ReleaseAll(rctx, locks) {
		if err != nil {
			// As release: nothing to undo, the fence saw to the writes.
			s.log.Warn("lock release", "lock", LockName(holds[i].productID), "token", locks[i].Token(), "err", err)
		}
	}
}
