package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/fair"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/replicas"
)

// Locker hands out named locks stored in one Redis deployment (a single
// server, Sentinel, or Cluster: anything behind a redis.UniversalClient).
// Create one per process and share it: goroutines of one Locker that want
// the same lock queue up in memory, so at most one request per lock and
// process contends in Redis, and one subscription per process carries the
// hand-off messages.
//
// It is a thin layer over the package's layers (see docs/lock.md): the
// fair wait (lock/internal/fair), over the lease (lock/internal/lease),
// over the core calls to Redis (lock/internal/core, or
// lock/internal/redlock). Two mutexes guard its state, one per layer that
// has shared state, and neither is ever taken while the other is held.
type Locker struct {
	f    *fair.Locker
	opts Options
}

// testControls are a Locker's test switches, each breaking one safeguard
// or shortening a step; the zero value is the lock as documented. Only the
// package's tests set them (export_test.go), per Locker.
type testControls struct {
	fair               fair.TestControls
	keepSubMillisecond bool
	retryScriptCalls   bool
	scripts            *core.Scripts // nil: the lock's own
}

// New returns a Locker whose locks live in the Redis deployment behind
// client. It checks opts but does not contact Redis.
func New(client redis.UniversalClient, opts Options) (*Locker, error) {
	return newSingle(client, opts, testControls{})
}

func newSingle(client redis.UniversalClient, opts Options, tc testControls) (*Locker, error) {
	return newLocker(opts, tc, func(o Options, id string, _ func(func())) core.Backend {
		var b core.Backend = core.NewSingle(client, core.Config{
			TTL: o.TTL, EntryLease: o.entryLease(), FenceTTLms: o.fenceTTLms(),
			Scripts: o.scripts(tc), RetryScriptCalls: tc.retryScriptCalls,
		}, id)
		if o.WaitReplicas > 0 {
			b = replicas.New(b, client, o.WaitReplicas, o.WaitReplicasTimeout, o.TTL)
		}
		return b
	})
}

// newLocker checks opts and builds the layers over the backend mk makes.
func newLocker(opts Options, tc testControls, mk func(o Options, id string, goCall func(func())) core.Backend) (*Locker, error) {
	opts, err := opts.withDefaults(tc.keepSubMillisecond)
	if err != nil {
		return nil, err
	}
	cfg := fair.Config{
		Prefix:          opts.Prefix,
		TTL:             opts.TTL,
		WaitTimeout:     opts.WaitTimeout,
		RecheckInterval: opts.RecheckInterval,
		ClaimLease:      opts.claimLease(),
		NoLocalRuns:     opts.DisableRenewal || opts.WaitReplicas > 0,
		Lease: lease.Config{
			TTL:            opts.TTL,
			RenewInterval:  opts.RenewInterval,
			DisableRenewal: opts.DisableRenewal,
			BackoffCap:     opts.RecheckInterval,
		},
		Observer: opts.Observer,
		Test:     tc.fair,
	}
	f := fair.New(cfg, func(id string, goCall func(func())) core.Backend { return mk(opts, id, goCall) })
	return &Locker{f: f, opts: opts}, nil
}

// scripts is the script set these options, and a test's controls, select.
func (o Options) scripts(tc testControls) *core.Scripts {
	switch {
	case o.UnsafeCounterTokens:
		return core.CounterTokenScripts
	case tc.scripts != nil:
		return tc.scripts
	}
	return core.SafeScripts
}

// Acquire blocks until it holds the lock called name, ctx ends, or
// Options.WaitTimeout passes. The returned Lock must be released with
// Release (defer it right away); its lease is renewed in the background
// unless Options.DisableRenewal is set, and Lost reports when it was lost.
//
// A wait that ends returns an error matching ErrNotAcquired and the
// context's error. An uncontended Acquire costs one round trip to Redis.
func (l *Locker) Acquire(ctx context.Context, name string) (*Lock, error) {
	h, err := l.f.Acquire(ctx, name, true)
	return l.lock(h), err
}

// TryAcquire makes one attempt and returns ErrNotAcquired at once if the
// lock is held, or if this Locker is busy with it: another goroutine holds
// or awaits it, or the Locker is still withdrawing a place in its queue or
// a grant that nobody here took.
func (l *Locker) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	h, err := l.f.Acquire(ctx, name, false)
	return l.lock(h), err
}

// TryAcquireAll makes one attempt at each of names, as TryAcquire does,
// and sends them together: one round trip to Redis for all of them (with
// Cluster, one pipeline to each master their slots are on), where
// TryAcquire calls would take one each. It returns, for each name, its
// Lock, or the error TryAcquire would have (matching ErrNotAcquired when
// the lock is held, or this Locker is busy with it, as it is with a name
// that comes twice). It waits for nobody. A program that serves many locks
// at once, each for a short batch of work, takes them this way, and waits
// (Acquire) only for those held elsewhere. On Redlock the attempts run at
// once, each its own round trip to every node.
func (l *Locker) TryAcquireAll(ctx context.Context, names []string) ([]*Lock, []error) {
	holds, errs := l.f.TryAcquireAll(ctx, names)
	locks := make([]*Lock, len(holds))
	for i, h := range holds {
		locks[i] = l.lock(h)
	}
	return locks, errs
}

// ReleaseAll releases each of locks, as Release does, and sends their
// calls to Redis together: one round trip for all of them, where Release
// calls would take one each. It returns each Lock's Release error. The
// Locks must be this Locker's.
func (l *Locker) ReleaseAll(ctx context.Context, locks []*Lock) []error {
	errs := make([]error, len(locks))
	var holds []*fair.Hold
	var at []int
	for i, lk := range locks {
		if lk.locker != l {
			errs[i] = fmt.Errorf("lock: release %q: the Lock is another Locker's", lk.Name())
			continue
		}
		holds = append(holds, lk.h)
		at = append(at, i)
	}
	for j, err := range l.f.ReleaseAll(ctx, holds) {
		errs[at[j]] = err
	}
	return errs
}

// Do runs fn while holding the lock called name: the acquire / try /
// finally-release pattern, written once. fn's context is cancelled,
// with cause ErrLeaseLost, if the lease is lost while fn runs; fn should stop
// writing when it is. The lock is released when fn returns, with an error or
// a panic. Do returns fn's error joined with the release's (see Release): a lease lost
// during fn shows up as ErrLeaseLost even when fn succeeded, because the
// critical section may not have been exclusive.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context, lk *Lock) error) (err error) {
	lk, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	fctx, cancel := lk.Context(ctx)
	defer func() {
		cancel()
		// The caller's ctx may be done by now; the release must still run.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), core.ReleaseTimeout)
		defer rcancel()
		if rerr := lk.Release(rctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx, lk)
}

// Close stops the Locker's background work: waiters get ErrClosed, held
// Locks stop renewing and report ErrClosed through Lost. Release held Locks
// first. An Acquire that completes after Close has begun withdraws what it
// got and returns ErrClosed: a Lock it returned would have nobody to renew
// its lease or report its loss. Close takes the process out of every lock's
// queue (a ticket left queued could be granted to this closed process and
// block the lock for its claim lease), and waits for every goroutine the
// Locker started.
func (l *Locker) Close() error {
	l.f.Close()
	return nil
}

// Names reports how many lock names this Locker keeps state for in
// memory: names held, awaited or queued for by this process, still being
// withdrawn, or whose grants it is subscribed to. The state of a name is
// forgotten when the process is done with it, so Names falls back to 0
// whenever nothing is held or awaited, however many names were locked: a
// count that stays above 0 then is state left behind.
func (l *Locker) Names() int { return l.f.Names() }

// lock is the Lock of hold h, nil for none.
func (l *Locker) lock(h *fair.Hold) *Lock {
	if h == nil {
		return nil
	}
	return &Lock{locker: l, h: h}
}
