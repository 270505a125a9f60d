package lock

import (
	"cmp"
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

// release runs the release script for lk. When other goroutines of this
// process wait for the lock, the same script queues the process under a new
// ticket, and if the process is first in line the lock comes straight back:
// the oldest local waiter then holds it after one round trip. Before that,
// while lk has reserved tokens left, the next local waiter takes the lock
// at once (passHeld), and release returns when a check of the key sent
// after that answers.
func (l *Locker) release(ctx context.Context, lk *Lock) (released bool, err error) {
	l.mu.Lock()
	q := l.queues[lk.name]
	if q != nil {
		if checked := q.passHeld(lk); checked != nil {
			l.tend(q)
			l.mu.Unlock()
			select {
			case err := <-checked:
				switch err {
				case nil: // the key was still the run's after the hand-off
					return true, nil
				case ErrLeaseLost: // it was not: the hold may not have been exclusive
					return false, nil
				}
				return false, fmt.Errorf("%w: %w", errUnchecked, err)
			case <-ctx.Done():
				return false, fmt.Errorf("%w: %w", errUnchecked, ctx.Err())
			}
		}
	}
	requeue := ""
	if q != nil {
		requeue = q.release(lk)
	} else if lk.run != nil {
		lk.run.ended = true
	}
	l.mu.Unlock()

	sent := time.Now()
	res, err := l.backend.release(ctx, lk.k, lk.owner, requeue)
	if err == nil && res.requeueLost && !res.released && time.Now().Before(lk.Deadline()) && !hooks.noReleaseInference {
		// The first call's reply was lost and the second found the lock gone
		// or someone else's. The key lives at least until the Lock's
		// deadline, and only this Lock's owner can delete it before then:
		// the second call ran before the deadline (its reply came back
		// earlier), so the first call released it. (A Redis that lost the
		// key meanwhile, in a restart or a failover, looks the same: the
		// release cannot tell, and reports it released.)
		res.released = true
	}

	if lk.run != nil {
		// The release is the last check of lk's run: it answers Releases
		// that handed the lock on before it, if no renewal did; with its
		// error if it failed, as nothing of the run will check again.
		if err == nil && res.released {
			l.confirmed(lk.run, sent)
		} else {
			l.mu.Lock()
			lk.run.runLost(cmp.Or(err, ErrLeaseLost))
			l.mu.Unlock()
		}
	}

	l.mu.Lock()
	unwanted := ""
	if q != nil && l.queues[lk.name] == q {
		unwanted = q.released(lk, requeue, sent, res, err)
		l.tend(q)
	} else if err == nil && res.granted {
		unwanted = res.ticket
	}
	l.mu.Unlock()
	if unwanted != "" {
		l.withdraw(ctx, lk.k, unwanted)
	}
	return res.released, err
}

// errUnchecked is why a Release that passed the lock on in memory could
// not tell whether its hold was exclusive: no check of the key after the
// hand-off answered (Close, its context, a failed release of the run).
var errUnchecked = errors.New("no check of the key answered after the hand-off")

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

func (l *Locker) acquire(ctx context.Context, name string, wait bool) (*Lock, error) {
	start := time.Now()
	lk, contended, err := l.acquireOrWait(ctx, name, wait, start)
	if err == nil {
		err = l.backend.confirm(ctx, lk)
		if err == nil && l.isClosed() && !hooks.acquireIgnoresClose {
			// Close began while we acquired. It may have told this Lock
			// ErrClosed, or may have run before the Lock existed and
			// then nothing watches its lease: either way the caller must
			// not hold it. (Once Acquire has returned, Close reports
			// through Lost.)
			err = ErrClosed
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			_ = lk.Release(rctx)
			cancel()
		}
	}
	if err != nil {
		l.opts.Observer.AcquireFailed(name, time.Since(start), err)
		return nil, err
	}
	l.opts.Observer.Acquired(name, time.Since(start), contended)
	return lk, nil
}

func (l *Locker) acquireOrWait(ctx context.Context, name string, wait bool, start time.Time) (lk *Lock, contended bool, err error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, false, ErrClosed
	}
	q := l.queues[name]
	if q != nil && !wait {
		why := "held or awaited in this process"
		if !q.busy() && len(q.waiters) == 0 {
			why = "being withdrawn by this process" // a ticket or a grant nobody took
		}
		l.mu.Unlock()
		return nil, false, fmt.Errorf("%w: %q is %s", ErrNotAcquired, name, why)
	}
	front := false
	if q == nil {
		// Nobody here holds or awaits the lock: try Redis directly. While the
		// attempt is in flight, other goroutines queue behind it.
		q = l.newQueue(name)
		q.tryStart()
		l.mu.Unlock()

		g, err := l.tryOnce(ctx, q)

		l.mu.Lock()
		if g != nil && l.closed && !hooks.acquireIgnoresClose {
			// Close began while we asked: no Lock may start after it
			// (nothing would renew it or report its loss). Withdraw it.
			q.tried(nil)
			l.tend(q)
			l.mu.Unlock()
			l.withdraw(ctx, q.k, g.ticket)
			return nil, false, ErrClosed
		}
		if lk := q.tried(g); lk != nil {
			l.mu.Unlock()
			return lk, false, nil
		}
		if err == nil && !wait {
			err = fmt.Errorf("%w: %q is held", ErrNotAcquired, name)
		}
		if err != nil {
			l.tend(q)
			l.mu.Unlock()
			return nil, false, err
		}
		front = true // it came first, so it goes first
	}
	w := &waiter{ch: make(chan *Lock, 1)}
	q.arrive(w, front)
	l.tend(q)
	l.mu.Unlock()

	// The wait's own deadline, set only now: a context with a timeout is a
	// timer, and the uncontended path above should not pay for one.
	if l.opts.WaitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(l.opts.WaitTimeout))
		defer cancel()
	}

	var cause error
	select {
	case lk := <-w.ch:
		return lk, true, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-l.ctx.Done():
		cause = ErrClosed
	}
	l.mu.Lock()
	removed := q.leave(w)
	lastErr := q.lastErr
	l.tend(q)
	l.mu.Unlock()
	if !removed {
		// The lock was handed to us just as the wait ended: pass it on.
		lk := <-w.ch
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = lk.Release(rctx)
		cancel()
	}
	if lastErr != nil && cause != ErrClosed {
		return nil, true, fmt.Errorf("%w (last Redis error: %w)", notAcquired(name, cause), lastErr)
	}
	return nil, true, notAcquired(name, cause)
}

// tryOnce is the uncontended path: one acquire script that takes the lock
// if it is free and nobody is queued for it. It returns the lock won, or
// (nil, nil) when the lock is taken. An attempt that failed without a reply
// and was undone is made again, up to tryAttempts in all, as go-redis
// would have retried the call: a broken pooled connection or a server
// restarting should not fail an Acquire that a moment later would succeed.
func (l *Locker) tryOnce(ctx context.Context, q *queue) (*grant, error) {
	for attempt := 1; ; attempt++ {
		res, err := l.backend.attempt(ctx, q.k)
		if err == nil {
			if res.status != acquired {
				return nil, nil
			}
			return &grant{ticket: res.owner, token: res.token, deadline: res.deadline}, nil
		}
		if ctx.Err() != nil {
			return nil, notAcquired(q.name, ctx.Err())
		}
		var u undone
		if !errors.As(err, &u) || attempt == tryAttempts || !sleepCtx(ctx, l.ctx, l.backoff(attempt)) {
			return nil, notAcquired(q.name, err)
		}
	}
}

// tryAttempts bounds tryOnce's attempts after calls that failed without a
// reply.
const tryAttempts = 3

// sleepCtx waits d, and reports false if ctx or the Locker's context ended
// first.
func sleepCtx(ctx, lctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-lctx.Done():
		return false
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
