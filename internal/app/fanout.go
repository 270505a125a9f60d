package app

import (
	"context"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// recorders tells every Recorder: the Prometheus metrics and the
// dashboard's timeline each count purchases their own way.
type recorders []seckill.Recorder

func (rs recorders) PurchaseDone(o seckill.Outcome, took time.Duration) {
	for _, r := range rs {
		r.PurchaseDone(o, took)
	}
}

func (rs recorders) FenceRejected(stage seckill.FenceStage) {
	for _, r := range rs {
		r.FenceRejected(stage)
	}
}

func (rs recorders) BatchDone(size int) {
	for _, r := range rs {
		r.BatchDone(size)
	}
}

func (rs recorders) OrdersClosed(state seckill.OrderState, n int) {
	for _, r := range rs {
		r.OrdersClosed(state, n)
	}
}

func (rs recorders) ExpiriesInProgress(n int) {
	for _, r := range rs {
		r.ExpiriesInProgress(n)
	}
}

// observers tells every lock.Observer.
type observers []lock.Observer

func (os observers) Acquired(name string, wait time.Duration, contended bool) {
	for _, o := range os {
		o.Acquired(name, wait, contended)
	}
}

func (os observers) AcquireFailed(name string, wait time.Duration, err error) {
	for _, o := range os {
		o.AcquireFailed(name, wait, err)
	}
}

func (os observers) Released(name string, held time.Duration) {
	for _, o := range os {
		o.Released(name, held)
	}
}

func (os observers) RenewalFailed(name string, err error) {
	for _, o := range os {
		o.RenewalFailed(name, err)
	}
}

func (os observers) LeaseLost(name string) {
	for _, o := range os {
		o.LeaseLost(name)
	}
}

// countingStore is the store that tells placed how many orders each
// committed write made, per product: the dashboard's orders per second.
// The domain's Recorder is told how purchases end, not which product they
// bought; the store's writes are where the orders are. It is every
// design's store.
type countingStore struct {
	*store.Store
	placed func(productID int64, n int)
}

var (
	_ seckill.Store            = countingStore{}
	_ seckill.UnfencedStore    = countingStore{}
	_ seckill.ConditionalStore = countingStore{}
	_ seckill.CounterStore     = countingStore{}
)

func (s countingStore) PlaceOrders(ctx context.Context, productID, token, newStock int64, orders []*seckill.Order) error {
	err := s.Store.PlaceOrders(ctx, productID, token, newStock, orders)
	if err == nil && len(orders) > 0 {
		s.placed(productID, len(orders))
	}
	return err
}

// PlaceOrdersAll counts the orders of every product whose write the
// transaction committed: those its fence did not refuse.
func (s countingStore) PlaceOrdersAll(ctx context.Context, ps []seckill.Placement) ([]error, error) {
	refused, err := s.Store.PlaceOrdersAll(ctx, ps)
	if err != nil {
		return refused, err
	}
	for i, p := range ps {
		if refused[i] == nil && len(p.Orders) > 0 {
			s.placed(p.ProductID, len(p.Orders))
		}
	}
	return refused, nil
}

func (s countingStore) InsertOrder(ctx context.Context, o *seckill.Order) error {
	return s.one(o, s.Store.InsertOrder(ctx, o))
}

func (s countingStore) BuyConditionally(ctx context.Context, o *seckill.Order) error {
	return s.one(o, s.Store.BuyConditionally(ctx, o))
}

func (s countingStore) AddOrder(ctx context.Context, o *seckill.Order) error {
	return s.one(o, s.Store.AddOrder(ctx, o))
}

// WriteOrders counts the orders it inserted by product. The store does
// not say which of a batch it skipped (written before); those few, which
// only a writer's restart produces, are taken off the first product's.
func (s countingStore) WriteOrders(ctx context.Context, orders []*seckill.Order) (int, error) {
	n, err := s.Store.WriteOrders(ctx, orders)
	if err != nil || n == 0 {
		return n, err
	}
	byProduct := map[int64]int{orders[0].ProductID: n - len(orders)}
	for _, o := range orders {
		byProduct[o.ProductID]++
	}
	for id, k := range byProduct {
		if k > 0 {
			s.placed(id, k)
		}
	}
	return n, nil
}

// one tells placed about o when err is nil, and passes err on.
func (s countingStore) one(o *seckill.Order, err error) error {
	if err == nil {
		s.placed(o.ProductID, 1)
	}
	return err
}
