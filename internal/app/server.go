package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/handlers"
	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/metrics"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
	"github.com/seckill-ref/seckill/store"
)

// redisDialTimeout bounds the start-up check that Redis answers.
const redisDialTimeout = 3 * time.Second

// Server is one replica of the service: its database handle, its Redis
// client and Locker, its metrics and its HTTP server. Several can run in
// one process (the demo runs two on loopback ports, sharing one Redis and
// one SQLite file), since nothing is global.
type Server struct {
	cfg     Config
	writer  *orderWriter     // nil unless Design is redis-counter-async
	expiry  *background      // nil unless the design has reservations
	sweep   *background      // deletes expired idempotency keys
	locked  *seckill.Service // the lock design's service; nil in the other designs
	log     *slog.Logger
	store   *store.Store
	redis   []redis.UniversalClient // one per Redis master of the lock; none unless Lock is redis
	locker  *lock.Locker            // nil unless Lock is redis
	metrics *metrics.Metrics
	dash    *dashboard.Dashboard
	handler http.Handler
	http    *http.Server

	closeOnce sync.Once
	closeErr  error
}

// NewServer opens the database, connects to Redis (in redis mode), and
// builds the service and its HTTP handler. It fails with a message a person
// can act on when Redis does not answer or the database cannot be opened.
// cfg.AdminToken must be set. Call Close when done, after Serve returns.
func NewServer(ctx context.Context, cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("app: the admin token is empty")
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, log: logger, metrics: metrics.New(), dash: dashboard.New()}
	// Redis first: when it is missing, fail before creating a database file.
	var locker seckill.Locker
	var err error
	switch {
	case cfg.Design == DesignLock:
		locker, err = s.newLocker(ctx)
	case cfg.UsesRedis():
		_, err = s.connectRedis(ctx)
	}
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	st, err := store.Open(cfg.Database)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	s.store = st
	svc := s.newDesign(locker, countingStore{Store: st, placed: s.dash.OrdersPlaced})
	s.locked, _ = svc.(*seckill.Service)
	if e, ok := svc.(expirer); ok {
		// Every replica expires due reservations; with no payment window
		// there are none, unless an earlier run with one left some.
		every := cfg.ExpiryEvery()
		s.expiry = goBackground(func(ctx context.Context) { e.RunExpiry(ctx, every) })
	}
	s.sweep = goBackground(func(ctx context.Context) { sweepKeys(ctx, st, cfg, logger) })
	// The dashboard's timeline is shared through the service's Redis (the
	// first master under Redlock); the configurations without Redis keep
	// it per replica. It reads the products through the design, whose
	// numbers are the counters' in the counter designs.
	var shared redis.UniversalClient
	if len(s.redis) > 0 {
		shared = s.redis[0]
	}
	s.dash.Start(shared, svc, logger)
	s.handler = handlers.New(svc, handlers.Options{
		AdminToken: cfg.AdminToken,
		Logger:     logger,
		Metrics:    s.metrics.Handler(),
		Requests:   s.metrics,
		Dashboard:  s.dash,
		Idempotency: handlers.Idempotency{
			Store: st,
			// A request cannot take longer than the server lets it
			// write its answer: an attempt in flight for longer is lost.
			InFlight: cfg.HTTPWriteTimeout(),
			Observer: s.metrics,
		},
	})
	s.http = &http.Server{
		Handler: s.handler,
		// The header's own limit, within the whole request's.
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout(),
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// newLocker builds the Locker of the configured mode: the lock package
// over one Redis deployment (REDIS_ADDR, REDIS_URL, Sentinel or Cluster:
// redis.go) or, with REDIS_ADDRS, a Redlock over several independent
// masters; both are a *lock.Locker, which redisLocker adapts.
func (s *Server) newLocker(ctx context.Context) (seckill.Locker, error) {
	switch s.cfg.Lock {
	case LockNone:
		return noLocker{}, nil
	case LockLocal:
		return newLocalLocker(s.cfg.LockWait, observers{s.metrics, s.dash}), nil
	}
	opts := lock.Options{
		TTL:                 s.cfg.LockTTL,
		WaitTimeout:         s.cfg.LockWait,
		DisableRenewal:      !s.cfg.LockRenew,
		Observer:            observers{s.metrics, s.dash},
		UnsafeCounterTokens: s.cfg.UnsafeCounterTokens,
		WaitReplicas:        s.cfg.LockWaitReplicas,
		NodeTimeout:         s.cfg.RedlockNodeTimeout,
	}
	if s.cfg.UnsafeCounterTokens {
		s.log.Warn("UNSAFE: fencing tokens are the last token plus one; they go backwards after a restart from a stale snapshot")
	}
	if len(s.cfg.RedisAddrs) > 0 {
		return s.newRedlock(ctx, opts)
	}
	client, err := s.connectRedis(ctx)
	if err != nil {
		return nil, err
	}
	warnFewReplicas(ctx, client, s.cfg.LockWaitReplicas, s.log)
	l, err := lock.New(client, opts)
	if err != nil {
		return nil, err
	}
	s.locker = l
	return redisLocker{locker: l, clients: s.redis, quorum: 1}, nil
}

// newRedlock connects to every master of REDIS_ADDRS. A minority may be
// down at start-up, as it may be later: Redlock is built for that.
func (s *Server) newRedlock(ctx context.Context, opts lock.Options) (seckill.Locker, error) {
	pctx, cancel := context.WithTimeout(ctx, redisDialTimeout)
	defer cancel()
	quorum := len(s.cfg.RedisAddrs)/2 + 1
	var up int
	var errs []error
	for _, addr := range s.cfg.RedisAddrs {
		// A node must answer within a Redlock node timeout, not go-redis's
		// seconds: its calls honour their contexts and are not retried, and
		// a dead node's refused dial is not retried either. With go-redis's
		// default of 5 dial attempts, 100 ms apart, every call to a dead
		// node would wait out the whole node timeout, so one node down of
		// three would slow every acquisition to that timeout.
		c := redis.NewClient(&redis.Options{Addr: addr, Password: s.cfg.RedisPassword, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, DialTimeout: 500 * time.Millisecond})
		s.redis = append(s.redis, c)
		if err := dialCheck(pctx, addr); err != nil {
			errs = append(errs, redisUnreachable(addr, err))
			continue
		}
		up++
	}
	if up < quorum {
		return nil, fmt.Errorf("only %d of %d Redlock masters answered, %d needed:\n%w", up, len(s.cfg.RedisAddrs), quorum, errors.Join(errs...))
	}
	l, err := lock.NewRedlock(s.redis, opts)
	if err != nil {
		return nil, err
	}
	s.locker = l
	return redisLocker{locker: l, clients: s.redis, quorum: quorum}, nil
}

// dialCheck is a plain dial: go-redis would retry and log every attempt
// before giving up, burying the one message that says what to do.
func dialCheck(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// redisUnreachable says what was tried and what to do about it.
func redisUnreachable(addr string, err error) error {
	return fmt.Errorf("cannot reach Redis at %s (%v).\n"+
		"The redis lock mode needs a Redis server. Start one with\n"+
		"    redis-server --port 6379\n"+
		"or point -redis-addr (REDIS_ADDR) at yours, or run\n"+
		"    go run . demo\n"+
		"which needs nothing installed", addr, err)
}

// chaosHook turns the chaos settings into the Service's hook. Its pauses
// are counted in m while they last (seckill_chaos_paused), so that a fault
// test can tell holders paused in their critical sections.
func chaosHook(cfg Config, m *metrics.Metrics) func(ctx context.Context, products []int64) {
	if cfg.Chaos != nil {
		return cfg.Chaos
	}
	return pauseHook(cfg.ChaosPause, cfg.ChaosProb, m)
}

// expiryChaosHook is chaosHook for expiries: ExpiryChaos, or a pause of
// ChaosExpiryPause (with CHAOS_PROB's probability).
func expiryChaosHook(cfg Config, m *metrics.Metrics) func(ctx context.Context, products []int64) {
	if cfg.ExpiryChaos != nil {
		return cfg.ExpiryChaos
	}
	return pauseHook(cfg.ChaosExpiryPause, cfg.ChaosProb, m)
}

// pauseHook pauses for pause with probability prob; nil when it never
// would.
func pauseHook(pause time.Duration, prob float64, m *metrics.Metrics) func(ctx context.Context, products []int64) {
	if pause <= 0 || prob <= 0 {
		return nil
	}
	return func(ctx context.Context, _ []int64) {
		if prob < 1 && rand.Float64() >= prob {
			return
		}
		// A real stall would not end early; this one ends when the request
		// does, since a write with an ended context fails anyway.
		m.ChaosPaused(1)
		defer m.ChaosPaused(-1)
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// expirer is a design with reservations, whose due ones every replica
// expires: seckill.Service, Conditional, CounterSale.
type expirer interface {
	RunExpiry(ctx context.Context, every time.Duration)
}

// background is a goroutine of a replica's own, running until stop: the
// expiry of reservations, the sweep of idempotency keys.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// goBackground runs run in a new goroutine until stop cancels its context.
func goBackground(run func(ctx context.Context)) *background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		run(ctx)
	}()
	return b
}

// stop ends the goroutine and waits for it: an expiry round under way
// stops at its next call, and releases the locks it holds.
func (b *background) stop() {
	b.cancel()
	<-b.done
}

// Handler is the server's HTTP handler, for tests that call it directly.
func (s *Server) Handler() http.Handler { return s.handler }

// Metrics is the server's counters.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// Resident is what a replica keeps in memory per product or lock name,
// counted: state that a sale leaves behind in a long-running replica
// shows as a count above 0 when no request is in flight.
type Resident struct {
	// Queues is the products with a queue in the lock design's service
	// (seckill.Service.Queues): 0 in the other designs, which keep none.
	Queues int
	// LockNames is the lock names the Redis Locker keeps state for
	// (lock.Locker.Names): 0 without one.
	LockNames int
}

// Resident counts what this replica keeps in memory per product or lock
// name now: a check that a quiet replica keeps nothing of the products it
// sold.
func (s *Server) Resident() Resident {
	var r Resident
	if s.locked != nil {
		r.Queues = s.locked.Queues()
	}
	if s.locker != nil {
		r.LockNames = s.locker.Names()
	}
	return r
}

// Serve answers requests on ln until ctx ends, then shuts down gracefully:
// it stops accepting, and waits up to the shutdown timeout for in-flight
// requests, which release their locks as they finish. It returns nil after
// a clean shutdown. Serve may be called once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.http.Shutdown(sctx)
	if err != nil {
		err = fmt.Errorf("shutdown: in-flight requests did not finish within %v: %w", s.cfg.ShutdownTimeout, err)
		_ = s.http.Close()
	}
	<-errc // http.ErrServerClosed
	return err
}

// Close writes the dashboard's last seconds, stops the order writer after
// writing the orders still queued (redis-counter-async), stops the Locker (held
// leases stop renewing and run out within their TTL), closes the Redis
// client, then the database. Call it after
// Serve has returned, so that no request is still using them. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		s.dash.Close()
		if s.expiry != nil {
			s.expiry.stop()
		}
		if s.sweep != nil {
			s.sweep.stop()
		}
		if s.writer != nil {
			errs = append(errs, s.writer.stop(s.cfg.ShutdownTimeout))
		}
		if s.locker != nil {
			errs = append(errs, s.locker.Close())
		}
		for _, c := range s.redis {
			errs = append(errs, c.Close())
		}
		if s.store != nil {
			errs = append(errs, s.store.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
