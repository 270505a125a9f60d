package seckill

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// Defaults of the OrderWriter.
const (
	DefaultWriterBatch     = 256
	DefaultWriterBlock     = 100 * time.Millisecond
	DefaultWriterClaimIdle = 5 * time.Second
)

// WriterOptions configure an OrderWriter. Zero fields take the defaults.
type WriterOptions struct {
	// Batch is the most orders written in one transaction.
	Batch int
	// Block is how long one read waits for an order when the queue is
	// empty; it bounds how long Run takes to return once its context ends.
	Block time.Duration
	// ClaimIdle is how long an order may stay given to a writer without
	// being acknowledged before another writer takes it over. It must be
	// longer than a batch's write takes, or two writers write the same
	// batch (harmless: writes are idempotent, but wasted).
	ClaimIdle time.Duration
}

// OrderWriter writes the orders of AsyncCounterSale's queue to the
// database: it reads a batch, writes it in one transaction that skips
// orders already written, and acknowledges it. Every replica runs one,
// under a consumer name of its own; they share the queue as one consumer
// group, so each order goes to one writer. An order given to a writer that
// does not acknowledge it within ClaimIdle (it died, or its write failed)
// is claimed by the next writer that looks.
type OrderWriter struct {
	queue    OrderQueue
	store    CounterStore
	consumer string
	opts     WriterOptions
	chaos    func(ctx context.Context, products []int64)
	crec     CounterRecorder
	log      *slog.Logger
}

// NewOrderWriter returns a writer of queue's orders into store, reading as
// consumer. Of opts it uses Chaos (called between reading a batch and
// writing it), Counter and Logger.
func NewOrderWriter(queue OrderQueue, store CounterStore, consumer string, opts Options, wopts WriterOptions) *OrderWriter {
	o := opts.withDefaults()
	if wopts.Batch <= 0 {
		wopts.Batch = DefaultWriterBatch
	}
	if wopts.Block <= 0 {
		wopts.Block = DefaultWriterBlock
	}
	if wopts.ClaimIdle <= 0 {
		wopts.ClaimIdle = DefaultWriterClaimIdle
	}
	return &OrderWriter{queue: queue, store: store, consumer: consumer, opts: wopts,
		chaos: o.Chaos, crec: o.Counter, log: o.Logger}
}

// Run writes orders until ctx ends. It looks for orders to claim from
// other writers every ClaimIdle / 2, and otherwise reads new ones.
// Failures are logged and retried; the orders of a failed write stay
// queued, given to this writer, until they are claimed.
func (w *OrderWriter) Run(ctx context.Context) {
	nextClaim := time.Now()
	for ctx.Err() == nil {
		var batch []QueuedOrder
		var err error
		if !time.Now().Before(nextClaim) {
			nextClaim = time.Now().Add(w.opts.ClaimIdle / 2)
			batch, err = w.queue.Claim(ctx, w.consumer, w.opts.ClaimIdle, w.opts.Batch)
			if len(batch) > 0 {
				w.crec.OrdersClaimed(len(batch))
				w.log.Warn("orders claimed from a writer that did not write them", "orders", len(batch))
			}
		}
		if err == nil && len(batch) == 0 {
			batch, err = w.queue.Read(ctx, w.consumer, w.opts.Batch, w.opts.Block)
		}
		if err == nil {
			err = w.write(ctx, batch)
		}
		if err != nil && ctx.Err() == nil {
			w.log.Error("order writer", "err", err)
			pause(ctx, w.opts.Block)
		}
	}
}

// Flush writes the orders in the queue that no writer has been given,
// until there are none or ctx ends: the last thing a replica does before
// it stops. Orders given to writers that did not write them are left to
// be claimed.
func (w *OrderWriter) Flush(ctx context.Context) error {
	for {
		batch, err := w.queue.Read(ctx, w.consumer, w.opts.Batch, 0)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		if err := w.write(ctx, batch); err != nil {
			return err
		}
	}
}

// batchProducts lists the products of a batch's orders, each once.
func batchProducts(batch []QueuedOrder) []int64 {
	var ids []int64
	for _, q := range batch {
		if !slices.Contains(ids, q.Order.ProductID) {
			ids = append(ids, q.Order.ProductID)
		}
	}
	return ids
}

// write writes one batch and acknowledges it.
func (w *OrderWriter) write(ctx context.Context, batch []QueuedOrder) error {
	if len(batch) == 0 {
		return nil
	}
	w.crec.OrdersPending(len(batch))
	defer w.crec.OrdersPending(-len(batch))
	w.chaos(ctx, batchProducts(batch))
	// Once read, a batch is written even if Run is being stopped: Flush
	// comes next, and reads only what no writer has been given.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orderWriteTimeout)
	defer cancel()
	orders := make([]*Order, len(batch))
	ids := make([]string, len(batch))
	for i, q := range batch {
		orders[i], ids[i] = q.Order, q.ID
	}
	n, err := w.store.WriteOrders(ctx, orders)
	if err != nil {
		return err
	}
	w.crec.OrdersWritten(n)
	// Acknowledged only once written: a writer that dies in between
	// leaves them to be claimed and written again, which writes nothing.
	return w.queue.Ack(ctx, ids)
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
