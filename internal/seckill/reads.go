package seckill

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Shared reads: the fast path's reads of one product in one process are
// made together, one read for every buyer waiting for one.
//
//	N buyers ──queue──▶ leader: read the product and the N buyers' orders ─ answer each ─ hand the lead on
//
// Most requests of a flash sale end on the fast path (sold out, or a
// repeat click), and each needs the product and its own buyer's order;
// against a database a round trip away, reading them per request makes
// the round trip the cost of the answer. So the first buyer to arrive
// leads: it takes the buyers waiting (itself first, up to readBatchMax),
// reads the product and their orders once (Store.ProductAndBuyers), and
// gives each its answer; buyers who arrive meanwhile wait for the next
// read, which the first of them leads.
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

// readQueue holds one product's buyers waiting for a read. Guarded by
// reads.mu.
type readQueue struct {
	waiting []*readCall // arrival order; waiting[0] leads when leading is set
	leading bool
}

// readCall is one buyer waiting for a read.
type readCall struct {
	userID string
	state  readState       // guarded by reads.mu
	done   chan readResult // capacity 1: the answer, or the lead
}

type readState int

const (
	readQueued  readState = iota // waiting for a read
	readLeading                  // at the head: makes the next read
	readTaken                    // in a read; its answer comes on done
)

type readResult struct {
	p      *Product
	bought bool
	err    error
	lead   bool // not an answer: the call now leads its queue
}

// reads is the queues of the products being read in this process.
type reads struct {
	mu     sync.Mutex
	queues map[int64]*readQueue
}

// readTimeout bounds a shared read: it goes on when its leader's buyer
// leaves, since it reads for the others too.
const readTimeout = 10 * time.Second

// read returns the product and whether userID has an order for it, read
// after this call began, together with the other buyers' reads.
func (r *reads) read(ctx context.Context, store Store, productID int64, userID string) (*Product, bool, error) {
	c := &readCall{userID: userID, done: make(chan readResult, 1)}
	q, lead := r.enqueue(productID, c)
	if !lead {
		var res readResult
		select {
		case res = <-c.done:
		case <-ctx.Done():
			if r.leave(q, c) {
				return nil, false, fmt.Errorf("product %d: the buyer left before the read: %w: %w", productID, ErrBusy, ctx.Err())
			}
			// Taken into a read, or given the lead: the answer, or the
			// lead, is on its way.
			res = <-c.done
		}
		if !res.lead {
			return res.p, res.bought, res.err
		}
	}
	return r.lead(ctx, store, productID, q, c)
}

// enqueue adds c to the product's queue; c leads at once if nobody does.
func (r *reads) enqueue(productID int64, c *readCall) (q *readQueue, lead bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q = r.queues[productID]
	if q == nil {
		q = &readQueue{}
		r.queues[productID] = q
	}
	q.waiting = append(q.waiting, c)
	if !q.leading {
		q.leading, c.state = true, readLeading
	}
	return q, c.state == readLeading
}

// leave takes a queued c out of q. It reports false when c is taken or
// leading: its answer (or the lead) is then on its way.
func (r *reads) leave(q *readQueue, c *readCall) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.state != readQueued {
		return false
	}
	q.remove(c)
	return true
}

// lead makes one read for the buyers at the head of q, c first, answers
// them, and hands the lead on.
func (r *reads) lead(ctx context.Context, store Store, productID int64, q *readQueue, c *readCall) (*Product, bool, error) {
	defer r.handOn(productID, q)
	batch := r.take(q)
	answered := false
	defer func() {
		// Only a panic gets here with the batch unanswered: its buyers
		// must not wait for an answer that will never come.
		if !answered {
			for _, b := range batch {
				if b != c {
					b.done <- readResult{err: errReadAborted}
				}
			}
		}
	}()
	users := make([]string, len(batch))
	for i, b := range batch {
		users[i] = b.userID
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	p, bought, err := store.ProductAndBuyers(rctx, productID, users)
	for _, b := range batch {
		if b == c {
			continue
		}
		res := readResult{err: err}
		if err == nil {
			// Each buyer gets a copy of its own: callers may change it.
			pc := *p
			res = readResult{p: &pc, bought: bought[b.userID]}
		}
		b.done <- res
	}
	answered = true
	if err != nil {
		return nil, false, err
	}
	return p, bought[c.userID], nil
}

// errReadAborted answers the buyers of a shared read whose leader panicked.
var errReadAborted = errors.New("seckill: the shared read was aborted")

// take removes up to readBatchMax calls from the head of q, the leader
// first, and marks them taken.
func (r *reads) take(q *readQueue) []*readCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(q.waiting), readBatchMax)
	batch := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	for _, b := range batch {
		b.state = readTaken
	}
	return batch
}

// handOn passes the lead of q to the call at its head, or forgets q when
// nobody waits.
func (r *reads) handOn(productID int64, q *readQueue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(q.waiting) == 0 {
		q.leading = false
		if r.queues[productID] == q {
			delete(r.queues, productID)
		}
		return
	}
	next := q.waiting[0]
	next.state = readLeading
	next.done <- readResult{lead: true}
}

func (q *readQueue) remove(c *readCall) {
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return
		}
	}
}
