package seckill

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Options configure a Service. The zero value is the safe configuration:
// fenced writes, the real clock, no chaos, nothing recorded or logged.
type Options struct {
	// Unfenced skips steps 4 and 6's fence and runs the unfenced sequence
	// instead (see the package doc). Correct only under a lock
	// that is truly exclusive; required with a Locker whose tokens are 0.
	// The Store must then also be an UnfencedStore, whose writes the
	// sequence makes.
	Unfenced bool

	// Now is the clock that stamps orders. Default time.Now.
	Now func() time.Time

	// Chaos, when set, is called inside the critical section, after the
	// rules are checked and before anything is written, with the products
	// whose locks are held: the place where a long pause turns into a
	// lost lease. (The unfenced sequence calls it between its two writes,
	// where a pause loses the update just the same and a crash leaves the
	// order without its stock change.) Tests and demonstrations use it to
	// make races certain; production leaves it nil. In the counter designs
	// it is called between the take in Redis and the order's write:
	// CounterSale's insert, AsyncCounterSale's writer's.
	Chaos func(ctx context.Context, products []int64)

	// PayWindow, when positive, makes a purchase a reservation: the order
	// is pending until the buyer pays or cancels within PayWindow, or a
	// replica expires it and its unit goes back on sale
	// (docs/reservations.md). 0: orders are created paid, final at once.
	// The locked, conditional and redis-counter designs have it;
	// redis-counter-async refuses it (counter_async.go).
	PayWindow time.Duration

	// UnsafeExpiry and UnsafePayLate switch off one safeguard of a
	// reservation's life each, to show that the checks catch what it
	// prevents: for demonstrations and the controls of the tests only,
	// never in production. The Store must then also be an
	// UnsafeLifeStore.
	UnsafeExpiry  UnsafeExpiry
	UnsafePayLate bool

	// ExpiryChaos, when set, is called inside an expiry's critical
	// section, with the products whose locks it holds, before it writes:
	// as Chaos is for purchases. In redis-counter it is called between
	// the database's move of cancelled or expired orders and the give-back
	// of their units to the counter, cancels included: where a crash
	// loses those units. The conditional design has no such step.
	ExpiryChaos func(ctx context.Context, products []int64)

	// Recorder is told how each purchase ended. Default: nobody.
	Recorder Recorder
	// Counter is told what the counter designs do besides purchases.
	// Default: nobody.
	Counter CounterRecorder

	// Logger gets what the caller cannot act on, such as a lease that was
	// lost before its release. Default: discarded.
	Logger *slog.Logger

	// BatchMax is the most purchases of one product that one lock hold
	// serves together (group commit; see batch.go). 0 or 1 serves them one
	// at a time, as the package doc describes. Unfenced services always do.
	BatchMax int
	// QueueMax is the most purchases of one product that may wait for
	// their batch in this process; more are refused with ErrBusy at once.
	// Default DefaultQueueMax.
	QueueMax int
	// Wait is how long a purchase may wait for its batch, lock included,
	// before ErrBusy. Default DefaultWait.
	Wait time.Duration
}

// Defaults of the batching options.
const (
	DefaultQueueMax = 1024
	DefaultWait     = 2 * time.Second
)

// Service is the flash sale's use cases over a Locker and a Store. It is
// safe for concurrent use. Its only state is the purchases waiting for
// their batch in this process: replicas sharing a database and a lock
// service need no coordination.
type Service struct {
	catalog
	locker   Locker
	store    Store
	unfenced UnfencedStore // store's unfenced writes; nil unless Options.Unfenced
	now      func() time.Time
	chaos    func(ctx context.Context, products []int64)
	rec      Recorder
	log      *slog.Logger

	payWindow   time.Duration
	expiryChaos func(ctx context.Context, products []int64)
	unsafeLife  UnsafeLifeStore // store's unsafe writes; nil unless a control is on
	setStock    UnfencedStore   // the unlocked expiry's write-back; nil unless it is on
	unsafeExp   UnsafeExpiry
	payLate     bool

	batchMax, queueMax int
	wait               time.Duration
	batch              batcher
	commits            commits
	rounds             chan struct{} // one token per round at work (commit.go)
	reads              reads
	pays               *payments
}

// NewService returns a Service that locks with locker and keeps its data in
// store. With opts.Unfenced it panics if store is not an UnfencedStore: a
// wiring mistake, reported where the Service is built rather than at the
// first purchase.
func NewService(locker Locker, store Store, opts Options) *Service {
	s := &Service{
		catalog: catalog{store: store},
		locker:  locker,
		store:   store,
		now:     opts.Now,
		chaos:   opts.Chaos,
		rec:     opts.Recorder,

		payWindow:   opts.PayWindow,
		expiryChaos: opts.ExpiryChaos,
		log:         opts.Logger,
		batchMax:    max(opts.BatchMax, 1),
		queueMax:    opts.QueueMax,
		wait:        opts.Wait,
		batch:       newLine[*purchaseCall, callResult](),
		commits:     newLine[*holdCall, holdResult](),
		rounds:      make(chan struct{}, commitRounds),
		reads:       newLine[*readCall, readResult](),
	}
	if opts.UnsafeExpiry != ExpirySafe || opts.UnsafePayLate {
		u, ok := store.(UnsafeLifeStore)
		if !ok {
			panic(fmt.Sprintf("seckill: Options.UnsafeExpiry and UnsafePayLate need a store that implements UnsafeLifeStore; %T does not", store))
		}
		s.unsafeLife, s.unsafeExp, s.payLate = u, opts.UnsafeExpiry, opts.UnsafePayLate
		if s.unsafeExp == ExpiryUnlocked {
			if s.setStock, ok = store.(UnfencedStore); !ok {
				panic(fmt.Sprintf("seckill: Options.UnsafeExpiry %q needs a store that implements UnfencedStore; %T does not", opts.UnsafeExpiry, store))
			}
		}
	}
	if opts.Unfenced {
		u, ok := store.(UnfencedStore)
		if !ok {
			panic(fmt.Sprintf("seckill: Options.Unfenced needs a store that implements UnfencedStore; %T does not", store))
		}
		s.unfenced = u
	}
	if s.queueMax <= 0 {
		s.queueMax = DefaultQueueMax
	}
	if s.wait <= 0 {
		s.wait = DefaultWait
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.chaos == nil {
		s.chaos = func(context.Context, []int64) {}
	}
	if s.expiryChaos == nil {
		s.expiryChaos = func(context.Context, []int64) {}
	}
	if s.rec == nil {
		s.rec = nopRecorder{}
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.pays = newPayments(store.PayOrders, s.now, s.rec)
	return s
}

// Restock sets a product's stock. It takes the product's lock and fence like
// a purchase does: a restock written between a purchase's read and its
// write-back would otherwise be overwritten by "the value read minus one".
// The product it returns is the state the restock produced, read inside the
// lock (with fencing, in the write's own transaction): a purchase that ran
// after the restock is not in it, so the answer shows the stock that was set.
func (s *Service) Restock(ctx context.Context, id, stock int64) (*Product, error) {
	if err := ValidateProductID(id); err != nil {
		return nil, err
	}
	if err := ValidateStock(stock); err != nil {
		return nil, err
	}
	if _, err := s.store.Product(ctx, id); err != nil {
		return nil, err
	}
	var p *Product
	err := s.locked(ctx, id, func(ctx context.Context, token int64) error {
		var err error
		if s.unfenced != nil {
			if err = s.unfenced.SetStock(ctx, id, stock); err != nil {
				return err
			}
			p, err = s.store.Product(ctx, id)
			return err
		}
		if err = s.claim(ctx, id, token); err != nil {
			return err
		}
		p, err = s.store.SetStockFenced(ctx, id, stock, token)
		return s.fenced(FenceWrite, err)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Ready reports whether the database and the lock service answer.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.store.Ping(ctx); err != nil {
		return fmt.Errorf("seckill: database not ready: %w", err)
	}
	if err := s.locker.Ping(ctx); err != nil {
		return fmt.Errorf("seckill: lock service not ready: %w", err)
	}
	return nil
}

// Queues reports how many queues this Service keeps in memory: one per
// product with purchases waiting for or in a batch, and the shared reads',
// the shared payments' and the rounds' queues while anyone waits in them. A queue is forgotten
// when its last call is served, so Queues falls back to 0 whenever no
// request is in flight, however many products were sold: a count that
// stays above 0 then is state left behind.
func (s *Service) Queues() int {
	return s.batch.products() + s.commits.products() + s.reads.products() + s.pays.products()
}
