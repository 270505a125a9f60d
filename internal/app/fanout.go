package app

import (
	"context"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
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

// countingStore is the Store that tells placed how many orders each
// committed write made, per product: the dashboard's orders per second.
// The domain's Recorder is told how purchases end, not which product they
// bought; the store's writes are where the orders are.
type countingStore struct {
	seckill.Store
	placed func(productID int64, n int)
}

func (s countingStore) PlaceOrders(ctx context.Context, productID, token, newStock int64, orders []*seckill.Order) error {
	err := s.Store.PlaceOrders(ctx, productID, token, newStock, orders)
	if err == nil && len(orders) > 0 {
		s.placed(productID, len(orders))
	}
	return err
}

func (s countingStore) InsertOrder(ctx context.Context, o *seckill.Order) error {
	err := s.Store.InsertOrder(ctx, o)
	if err == nil {
		s.placed(o.ProductID, 1)
	}
	return err
}
