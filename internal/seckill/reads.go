package seckill

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Shared reads: the fast path's reads in one process are made together,
// one read for every buyer waiting for one, whatever product each buys.
//
//	N buyers ──queue──▶ leader: read the products and the N buyers' orders ─ answer each ─ hand the lead on
//
// Most requests of a flash sale end on the fast path (sold out, or a
// repeat click), and each needs its product and its own buyer's order;
// against a database a round trip away, reading them per request makes
// the round trip the cost of the answer. So the first buyer to arrive
// leads: it takes the buyers waiting (itself first, up to readBatchMax),
// reads their products and their orders at once
// (Store.ProductsAndBuyers), and gives each its answer; buyers who arrive
// meanwhile wait for the next read, which the first of them leads. A sale
// of one hot product and one of many cost the same: the read is shared
// across products.
//
// A buyer's answer is therefore the database as it was at one moment
// after the buyer arrived and before the answer: the read starts only
// after the buyer has been taken from the queue, and a buyer who arrives
// while a read is in flight is not given that read's answer, whose
// snapshot may be older than its arrival (a restock that finished just
// before would be missing from it). That is what keeps the history
// linearizable, as it is with one read per buyer.

// readBatchMax is the most buyers one shared read looks up.
const readBatchMax = 256

// readsKey is the one queue of the reads line: every product's.
const readsKey = 0

// readCall is one buyer waiting for a read.
type readCall struct {
	seat[readResult]
	productID int64
	userID    string
}

type readResult struct {
	p      *Product
	bought bool
	err    error
}

// reads is the line of this process's shared reads (line.go).
type reads = line[*readCall, readResult]

// readTimeout bounds a shared read: it goes on when its leader's buyer
// leaves, since it reads for the others too.
const readTimeout = 10 * time.Second

// read returns the product and whether userID has an order for it, read
// after this call began, together with the other buyers' reads.
func (s *Service) read(ctx context.Context, productID int64, userID string) (*Product, bool, error) {
	c := &readCall{seat: newSeat[readResult](), productID: productID, userID: userID}
	q, lead, _ := s.reads.join(readsKey, c, unbounded)
	if !lead {
		t, left := s.reads.wait(ctx, q, c, nil)
		if left != nil {
			return nil, false, fmt.Errorf("product %d: the buyer left before the read: %w: %w", productID, ErrBusy, left)
		}
		if !t.lead {
			return t.answer.p, t.answer.bought, t.answer.err
		}
	}
	// The read starts after every buyer it serves was taken from the
	// queue, so after each of them arrived.
	defer s.reads.handOn(readsKey, q, c)
	batch, _, _ := s.reads.take(q, c, readBatchMax, nil)
	mine := serveTaken(batch, c, readResult{err: errReadAborted}, func() []readResult {
		want := make([]BuyersOf, 0, len(batch))
		at := map[int64]int{} // product -> its place in want
		for _, b := range batch {
			i, ok := at[b.productID]
			if !ok {
				i = len(want)
				at[b.productID] = i
				want = append(want, BuyersOf{ProductID: b.productID})
			}
			want[i].UserIDs = append(want[i].UserIDs, b.userID)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		products, bought, err := s.store.ProductsAndBuyers(rctx, want)
		answers := make([]readResult, len(batch))
		for i, b := range batch {
			p := products[b.productID]
			switch {
			case err != nil:
				answers[i] = readResult{err: err}
			case p == nil:
				answers[i] = readResult{err: fmt.Errorf("product %d: %w", b.productID, ErrNotFound)}
			default:
				// Each buyer gets a copy of its own: callers may change it.
				pc := *p
				answers[i] = readResult{p: &pc, bought: bought[b.productID][b.userID]}
			}
		}
		return answers
	})
	return mine.p, mine.bought, mine.err
}

// errReadAborted answers the buyers of a shared read whose leader panicked.
var errReadAborted = errors.New("seckill: the shared read was aborted")
