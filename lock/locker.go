package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/backend"
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/handoff"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
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
// wait in one process (lock/internal/handoff), over the line of waiting
// processes in Redis (lock/internal/queue) and the subscription that
// carries its grants (lock/internal/subscription), over the lease
// (lock/internal/lease) and the pattern itself (lock/internal/core, or
// lock/internal/redlock over several masters).
type Locker struct {
	f    *handoff.Locker
	opts Options
}

// testControls are a Locker's test switches, each breaking one safeguard
// or shortening a step; the zero value is the lock as documented. Only the
// package's tests set them (export_test.go), per Locker.
type testControls struct {
	handoff            handoff.TestControls
	keepSubMillisecond bool
	retryScriptCalls   bool
	// edit, when set, changes each script's source, by name ("acquire",
	// "wait", "release", "withdraw", "unlock"), before it is compiled: a
	// broken rule.
	edit func(name, src string) string
}

// New returns a Locker whose locks live in the Redis deployment behind
// client. It checks opts but does not contact Redis.
func New(client redis.UniversalClient, opts Options) (*Locker, error) {
	return newSingle(client, opts, testControls{})
}

func newSingle(client redis.UniversalClient, opts Options, tc testControls) (*Locker, error) {
	return newLocker(opts, tc, func(o Options, id string, _ func(func())) backend.Backend {
		s := o.scripts(tc)
		c := core.New(client, core.Config{TTL: o.TTL, FenceTTL: o.fenceTTL(), Scripts: s.core, RetryScriptCalls: tc.retryScriptCalls})
		q := queue.New(client, queue.Config{
			TTL: o.TTL, EntryLease: o.entryLease(), FenceTTL: o.fenceTTL(), Reserve: burst - 1,
			Scripts: s.queue, RetryScriptCalls: tc.retryScriptCalls,
		}, id)
		var confirm *replicas.Confirmer
		if o.WaitReplicas > 0 {
			confirm = replicas.New(client, o.WaitReplicas, o.WaitReplicasTimeout, o.TTL)
		}
		return backend.Single(client, c, q, confirm)
	})
}

// newLocker checks opts and builds the layers over the backend mk makes.
func newLocker(opts Options, tc testControls, mk func(o Options, id string, goCall func(func())) backend.Backend) (*Locker, error) {
	opts, err := opts.withDefaults(tc.keepSubMillisecond)
	if err != nil {
		return nil, err
	}
	cfg := handoff.Config{
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
		Test:     tc.handoff,
	}
	f := handoff.NewLocker(cfg, func(id string, goCall func(func())) backend.Backend { return mk(opts, id, goCall) })
	return &Locker{f: f, opts: opts}, nil
}

// scriptSet are the scripts of the layers that have some.
type scriptSet struct {
	core  *core.Scripts
	queue *queue.Scripts
}

// scripts are the scripts these options, and a test's controls, select:
// the committed ones, or variants with the unsafe token rule of
// UnsafeCounterTokens, or with a test's broken rule.
func (o Options) scripts(tc testControls) scriptSet {
	if !o.UnsafeCounterTokens && tc.edit == nil {
		return scriptSet{core.DefaultScripts, queue.DefaultScripts}
	}
	src := map[string]string{"acquire": core.AcquireLua, "wait": queue.WaitLua, "release": queue.ReleaseLua,
		"withdraw": queue.WithdrawLua, "unlock": queue.UnlockLua}
	for name, s := range src {
		if o.UnsafeCounterTokens && name != "unlock" {
			var err error
			if s, err = core.Splice(s, "token.lua", core.CounterTokensLua); err != nil {
				panic(fmt.Sprintf("lock: %s: %v", name, err)) // the committed scripts all carry it
			}
		}
		if tc.edit != nil {
			s = tc.edit(name, s)
		}
		src[name] = s
	}
	return scriptSet{core.NewScripts(src["acquire"]), queue.NewScripts(src["wait"], src["release"], src["withdraw"], src["unlock"])}
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
	var holds []*handoff.Hold
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
func (l *Locker) lock(h *handoff.Hold) *Lock {
	if h == nil {
		return nil
	}
	return &Lock{locker: l, h: h}
}
