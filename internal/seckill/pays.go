package seckill

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Shared payments: the payments of one process are written together, in
// one transaction for every payment waiting for one, whatever products
// they are of.
//
//	N payers ──queue──▶ leader: move every order to paid, count every unit sold ─ answer each ─ hand the lead on
//
// A payment is a write of its order and of its product's reserved and
// sold counts; one transaction each makes a hot product's row, and the
// database's commit rate, the bottleneck of a sale whose buyers pay. As
// with shared reads (reads.go), the first payer leads: it takes the
// payments waiting (itself first, up to payBatchMax), writes them in one
// transaction (Store.PayOrders) and gives each its answer. Each payment is
// made after its payer arrived and before its answer, so the history stays
// linearizable; each is decided on its own (its order, its user, its
// window), and one that may not be made fails alone.

// payBatchMax is the most payments one transaction writes.
const payBatchMax = 256

// paysKey is the one queue of the payments line.
const paysKey = 0

// payCall is one payment waiting.
type payCall struct {
	seat[payResult]
	pay Payment
}

type payResult struct {
	order *Order
	err   error
}

// pays is the line of this process's payments (line.go).
type pays = line[*payCall, payResult]

// payTimeout bounds a shared payment's transaction: it goes on when its
// leader's payer leaves, since it pays for the others too.
const payTimeout = 10 * time.Second

// payWrite writes a batch of payments, as Store.PayOrders does: an error
// per payment that may not be made, or err for a failure of the whole
// call, which then writes nothing. The locked and conditional designs
// write with Store.PayOrders; redis-counter writes the orders alone and
// then tells its counter (counter_sale.go).
type payWrite func(ctx context.Context, ps []Payment, now time.Time) (orders []*Order, errs []error, err error)

// payments is a process's shared payments: its line, and how a batch is
// written.
type payments struct {
	line  pays
	write payWrite
	now   func() time.Time
	rec   Recorder
}

func newPayments(write payWrite, now func() time.Time, rec Recorder) *payments {
	return &payments{line: newLine[*payCall, payResult](), write: write, now: now, rec: rec}
}

// pay makes p together with the other payments waiting in this process.
func (ps *payments) pay(ctx context.Context, p Payment) (*Order, error) {
	c := &payCall{seat: newSeat[payResult](), pay: p}
	q, lead, _ := ps.line.join(paysKey, c, unbounded)
	if !lead {
		t, left := ps.line.wait(ctx, q, c, nil)
		if left != nil {
			return nil, fmt.Errorf("order %d: the payer left before the payment was made: %w: %w", p.OrderID, ErrBusy, left)
		}
		if !t.lead {
			return t.answer.order, t.answer.err
		}
	}
	defer ps.line.handOn(paysKey, q, c)
	batch, _, _ := ps.line.take(q, c, payBatchMax, nil)
	mine := serveTaken(batch, c, payResult{err: errPayAborted}, func() []payResult {
		pays := make([]Payment, len(batch))
		for i, b := range batch {
			pays[i] = b.pay
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), payTimeout)
		defer cancel()
		orders, errs, err := ps.write(pctx, pays, ps.now().UTC())
		answers := make([]payResult, len(batch))
		paid := 0
		for i := range batch {
			switch {
			case err != nil:
				// Nothing of the batch was written: no payment's answer.
				answers[i] = payResult{err: retryable(err)}
			case errs[i] != nil:
				answers[i] = payResult{err: errs[i]}
			default:
				answers[i] = payResult{order: orders[i]}
				paid++
			}
		}
		if paid > 0 {
			ps.rec.OrdersClosed(OrderPaid, paid)
		}
		return answers
	})
	return mine.order, mine.err
}

// products is how many queues the line keeps: one while anyone pays.
func (ps *payments) products() int { return ps.line.products() }

// errPayAborted answers the payers of a shared payment whose leader
// panicked.
var errPayAborted = errors.New("seckill: the shared payment was aborted")
