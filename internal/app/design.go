package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/handlers"
	"github.com/seckill-ref/seckill/internal/counter"
	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/seckill"
)

// design is what every design serves: the API, and the reads of the
// dashboard, whose numbers must be the design's own (the counters' in the
// counter designs).
type design interface {
	handlers.Service
	dashboard.Products
}

// newDesign builds the service of the configured design over st: the
// locked purchase over locker, or one of the designs that do without a
// lock. Redis, where the design uses it, is s.redis[0], connected already.
// For redis-counter-async it also starts this replica's order writer,
// which Close stops.
func (s *Server) newDesign(locker seckill.Locker, st countingStore) design {
	cfg := s.cfg
	opts := seckill.Options{
		Chaos:       chaosHook(cfg, s.metrics),
		ExpiryChaos: expiryChaosHook(cfg, s.metrics),
		PayWindow:   cfg.PayWindow,
		Recorder:    recorders{s.metrics, s.dash},
		Counter:     s.metrics,
		Logger:      s.log,
		BatchMax:    cfg.BatchMax,
		QueueMax:    cfg.QueueMax,
		Wait:        cfg.LockWait,
	}
	switch cfg.Design {
	case DesignConditional:
		return seckill.NewConditional(st, opts)
	case DesignCounter:
		return seckill.NewCounterSale(counter.New(s.redis[0], s.store.ID()), st, opts)
	case DesignCounterAsync:
		c := counter.New(s.redis[0], s.store.ID())
		// The writer's consumer name: one per process start, so that a
		// restarted replica's writer does not inherit the orders its
		// predecessor was given; those are claimed like any stopped
		// writer's.
		consumer := "writer-" + rand.Text()[:10]
		w := seckill.NewOrderWriter(c, st, consumer, opts, seckill.WriterOptions{ClaimIdle: cfg.OrderClaimIdle})
		s.writer = startOrderWriter(w)
		return seckill.NewAsyncCounterSale(c, c, st, opts)
	}
	opts.Unfenced = cfg.Lock != LockRedis || cfg.UnsafeNoFence
	opts.UnsafeExpiry, _ = seckill.ParseUnsafeExpiry(cfg.UnsafeExpiry) // checked by Validate
	opts.UnsafePayLate = cfg.UnsafePayLate
	if opts.UnsafeExpiry != seckill.ExpirySafe || opts.UnsafePayLate {
		s.log.Warn("UNSAFE: a safeguard of the reservations is off; units can be sold twice", "expiry", cfg.UnsafeExpiry, "pay_late", cfg.UnsafePayLate)
	}
	if cfg.Lock == LockRedis && cfg.UnsafeNoFence {
		s.log.Warn("UNSAFE: fencing is off; a holder whose lease runs out can oversell")
	}
	return seckill.NewService(locker, st, opts)
}

// orderWriter is a running seckill.OrderWriter and its goroutine.
type orderWriter struct {
	w      *seckill.OrderWriter
	cancel context.CancelFunc
	done   chan struct{}
}

func startOrderWriter(w *seckill.OrderWriter) *orderWriter {
	ctx, cancel := context.WithCancel(context.Background())
	ow := &orderWriter{w: w, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ow.done)
		w.Run(ctx)
	}()
	return ow
}

// stop ends Run, then writes the orders still queued that no writer has
// been given, within timeout. The replica has stopped answering by then,
// so the queue only shrinks, unless other replicas still sell.
func (ow *orderWriter) stop(timeout time.Duration) error {
	ow.cancel()
	<-ow.done
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := ow.w.Flush(ctx); err != nil {
		return fmt.Errorf("write the queued orders on shutdown: %w", err)
	}
	return nil
}
