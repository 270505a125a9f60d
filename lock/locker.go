package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Locker hands out named locks stored in one Redis deployment (a single
// server, Sentinel, or Cluster: anything behind a redis.UniversalClient).
// Create one per process and share it: goroutines of one Locker that want
// the same lock queue up in memory, so at most one request per lock and
// process contends in Redis, and one subscription per process carries the
// hand-off messages.
//
// Four mutexes nest, always in this order, each taken only while holding
// those before it or none: subscriber.opMu (syncChannel and reconnect read
// the wanted channels under it), then Locker.mu (newLock starts a Lock's
// watchdog entry under it), then Lock.mu (a Lock schedules its next event
// under it), then watchdog.mu, which is held while taking no other
// (watchdog.fire calls Lock.due after releasing it). redlock.mu guards only
// the count of node calls in flight and is taken with none of them held.
type Locker struct {
	backend backend
	opts    Options
	id      string // this process's identity in the locks' wait queues

	ctx    context.Context // ends at Close: stops drivers, watchdogs, the subscription
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Locker starts

	mu     sync.Mutex
	queues map[string]*queue // by lock name; present while held, awaited or queued here
	subs   []*subscriber     // one per backend subscriber client, nil while unused
	closed bool

	dog watchdog // renewals and deadlines of held Locks
}

// New returns a Locker whose locks live in the Redis deployment behind
// client. It checks opts but does not contact Redis.
func New(client redis.UniversalClient, opts Options) (*Locker, error) {
	return newLocker(opts, func(o Options, id string) backend {
		return newSingle(client, o, id)
	})
}

func newLocker(opts Options, mk func(Options, string) backend) (*Locker, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	id := uuid.NewString()
	b := mk(opts, id)
	l := &Locker{
		backend: b,
		opts:    opts,
		id:      id,
		ctx:     ctx,
		cancel:  cancel,
		queues:  make(map[string]*queue),
		subs:    make([]*subscriber, len(b.subscribers())),
	}
	l.dog.locker = l
	return l, nil
}

// goTracked runs fn in a goroutine counted in l.wg, unless Close has begun.
func (l *Locker) goTracked(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fn()
	}()
	return true
}

// Acquire blocks until it holds the lock called name, ctx ends, or
// Options.WaitTimeout passes. The returned Lock must be released with
// Release (defer it right away); its lease is renewed in the background
// unless Options.DisableRenewal is set, and Lost reports when it was lost.
//
// A wait that ends returns an error matching ErrNotAcquired and the
// context's error. An uncontended Acquire costs one round trip to Redis.
func (l *Locker) Acquire(ctx context.Context, name string) (*Lock, error) {
	return l.acquire(ctx, name, true)
}

// TryAcquire makes one attempt and returns ErrNotAcquired at once if the
// lock is held, or if this Locker is busy with it: another goroutine holds
// or awaits it, or the Locker is still withdrawing a place in its queue or
// a grant that nobody here took.
func (l *Locker) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	return l.acquire(ctx, name, false)
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
	start := time.Now()
	locks, errs := make([]*Lock, len(names)), make([]error, len(names))
	qs := make([]*queue, len(names))
	l.mu.Lock()
	for i, name := range names {
		switch err := checkName(name); {
		case err != nil:
			errs[i] = err
		case l.closed:
			errs[i] = ErrClosed
		case l.queues[name] != nil:
			errs[i] = fmt.Errorf("%w: %q is held or awaited in this process", ErrNotAcquired, name)
		default:
			qs[i] = l.newQueue(name)
			qs[i].tryStart()
		}
	}
	l.mu.Unlock()

	var ks []keys
	var sentFor []int
	for i, q := range qs {
		if q != nil {
			ks = append(ks, q.k)
			sentFor = append(sentFor, i)
		}
	}
	res, rerrs := l.backend.attemptAll(ctx, ks)
	var unwanted []int // won after Close began: withdrawn
	l.mu.Lock()
	for j, i := range sentFor {
		q := qs[i]
		var g *grant
		if rerrs[j] == nil && res[j].status == acquired {
			g = &grant{ticket: res[j].owner, token: res[j].token, deadline: res[j].deadline}
		}
		if g != nil && l.closed && !hooks.acquireIgnoresClose {
			q.tried(nil)
			l.tend(q)
			unwanted = append(unwanted, j)
			errs[i] = ErrClosed
			continue
		}
		if locks[i] = q.tried(g); locks[i] != nil {
			continue
		}
		l.tend(q)
		if rerrs[j] != nil {
			errs[i] = notAcquired(q.name, rerrs[j])
		} else {
			errs[i] = fmt.Errorf("%w: %q is held", ErrNotAcquired, q.name)
		}
	}
	l.mu.Unlock()
	for _, j := range unwanted {
		l.withdraw(ctx, ks[j], res[j].owner)
	}
	for i, lk := range locks {
		if lk != nil {
			locks[i], errs[i] = l.acquired(ctx, lk, nil)
		}
		if errs[i] != nil {
			l.opts.Observer.AcquireFailed(names[i], time.Since(start), errs[i])
		} else {
			l.opts.Observer.Acquired(names[i], time.Since(start), false)
		}
	}
	return locks, errs
}

// ReleaseAll releases each of locks, as Release does, and sends their
// calls to Redis together: one round trip for all of them, where Release
// calls would take one each. It returns each Lock's Release error. The
// Locks must be this Locker's.
func (l *Locker) ReleaseAll(ctx context.Context, locks []*Lock) []error {
	errs := make([]error, len(locks))
	begun := make([]releaseBegun, len(locks))
	var going []*Lock
	var at []int
	for i, lk := range locks {
		if lk.locker != l {
			errs[i] = fmt.Errorf("lock: release %q: the Lock is another Locker's", lk.name)
			continue
		}
		if begun[i], errs[i] = lk.startRelease(); errs[i] == nil {
			going = append(going, lk)
			at = append(at, i)
		}
	}
	released, rerrs := l.releaseAll(ctx, going)
	for j, i := range at {
		errs[i] = locks[i].endRelease(begun[i], released[j], rerrs[j])
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
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer rcancel()
		if rerr := lk.Release(rctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx, lk)
}

// releaseTimeout bounds the calls that run without a caller's context, or
// after it ended: releases, withdraws, the driver's calls. If a release or
// a withdraw fails, the lease's TTL frees the lock.
const releaseTimeout = 2 * time.Second

// Close stops the Locker's background work: waiters get ErrClosed, held
// Locks stop renewing and report ErrClosed through Lost. Release held Locks
// first. An Acquire that completes after Close has begun withdraws what it
// got and returns ErrClosed: a Lock it returned would have nobody to renew
// its lease or report its loss. Close takes the process out of every lock's
// queue (a ticket left queued could be granted to this closed process and
// block the lock for its claim lease), and waits for every goroutine the
// Locker started.
func (l *Locker) Close() error {
	type withdrawal struct {
		k      keys
		ticket string
	}
	l.mu.Lock()
	l.closed = true
	subs := l.subs
	l.subs = make([]*subscriber, len(subs))
	var held []*Lock
	var tickets []withdrawal
	for _, q := range l.queues {
		holder, ts := q.close()
		if holder != nil {
			held = append(held, holder)
		}
		for _, t := range ts {
			tickets = append(tickets, withdrawal{q.k, t})
		}
	}
	l.mu.Unlock()
	for _, g := range tickets {
		l.withdraw(context.Background(), g.k, g.ticket)
	}
	l.cancel()
	for _, lk := range held {
		lk.lose(ErrClosed)
	}
	l.dog.stop()
	for _, s := range subs {
		if s != nil {
			s.close()
		}
	}
	l.wg.Wait()
	l.backend.close()
	return nil
}

// tend is called under Locker.mu after every event of q: it starts or
// wakes q's driver while q has work (goroutines waiting, a ticket, tickets
// to withdraw), and forgets q when nothing is left.
func (l *Locker) tend(q *queue) {
	if len(q.waiters) > 0 || q.ticket != "" || len(q.withdrawing) > 0 {
		if q.driver == stopped && !l.closed {
			q.driver = starting
			if q.wakeup == nil {
				q.wakeup = make(chan struct{}, 1)
			}
			l.wg.Add(1)
			go l.drive(q)
		}
	}
	if q.driver != stopped {
		q.wake() // also when nothing is left: the driver ends
		return
	}
	if !q.busy() && len(q.waiters) == 0 && l.queues[q.name] == q {
		delete(l.queues, q.name)
	}
}

// Names reports how many lock names this Locker keeps state for in
// memory: names held, awaited or queued for by this process, still being
// withdrawn, or whose grants it is subscribed to. The state of a name is
// forgotten when the process is done with it, so Names falls back to 0
// whenever nothing is held or awaited, however many names were locked: a
// count that stays above 0 then is state left behind.
func (l *Locker) Names() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make(map[string]bool, len(l.queues))
	for name := range l.queues {
		names[name] = true
	}
	for _, s := range l.subs {
		if s == nil {
			continue
		}
		for _, sc := range s.channels {
			names[sc.q.name] = true
		}
	}
	return len(names)
}

// leaseEnded is told by a Lock that lost its lease: it no longer keeps this
// process's other waiters from contending, and its run is over.
func (l *Locker) leaseEnded(lk *Lock, cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lk.run != nil {
		lk.run.runLost(cause)
	}
	if q := l.queues[lk.name]; q != nil {
		q.lost(lk)
		l.tend(q)
	}
}

// isClosed reports whether Close has begun.
func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// withdraw gives ticket up for good, also after the caller's context
// ended: it deletes the lock if ticket owns it (passing it to the next
// waiter), takes the ticket out of the queue, and leaves a tombstone that
// makes a late acquire with it fail. If the withdraw fails too, the
// lease's TTL frees the lock.
func (l *Locker) withdraw(ctx context.Context, k keys, ticket string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_ = l.backend.withdraw(cctx, k, ticket)
}

// checkName refuses names that would break the hash tag: an empty tag, or
// one cut short, would spread a lock's keys over several Cluster slots.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "{}") {
		return fmt.Errorf("lock: invalid name %q: it must be non-empty and must not contain '{' or '}'", name)
	}
	return nil
}
