package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
)

var (
	_ seckill.Locker = (*localLocker)(nil)
	_ seckill.Locker = noLocker{}
)

// localLocker is the local lock mode: one mutex per product in this
// process's memory, with the same bounded wait as the Redis lock. Two
// replicas each have their own, so both can be "inside" at once: the mode
// exists to show that. Its tokens are 0; it cannot fence.
type localLocker struct {
	wait     time.Duration
	observer lock.Observer // the same counters as the Redis lock, for comparison

	mu    sync.Mutex
	locks map[string]*localMutex // present while held or awaited
}

// localMutex is a mutex that can be waited for with a deadline: a channel
// with room for one token. refs counts holders and waiters, so that the
// map entry goes when nobody needs it.
type localMutex struct {
	ch   chan struct{}
	refs int
}

func newLocalLocker(wait time.Duration, observer lock.Observer) *localLocker {
	return &localLocker{wait: wait, observer: observer, locks: make(map[string]*localMutex)}
}

// Acquire waits up to the configured wait for the product's mutex.
func (l *localLocker) Acquire(ctx context.Context, name string) (seckill.Lock, error) {
	start := time.Now()
	m := l.ref(name)
	select {
	case m.ch <- struct{}{}:
		l.observer.Acquired(name, time.Since(start), false)
		return &localLock{l: l, name: name, m: m, acquired: time.Now()}, nil
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, l.wait)
	defer cancel()
	select {
	case m.ch <- struct{}{}:
		l.observer.Acquired(name, time.Since(start), true)
		return &localLock{l: l, name: name, m: m, acquired: time.Now()}, nil
	case <-ctx.Done():
		l.unref(name, m)
		err := fmt.Errorf("%w: local lock %q not acquired: %w", seckill.ErrBusy, name, ctx.Err())
		l.observer.AcquireFailed(name, time.Since(start), err)
		return nil, err
	}
}

// TryAcquireAll takes each mutex that is free, waiting for none.
func (l *localLocker) TryAcquireAll(_ context.Context, names []string) ([]seckill.Lock, []error) {
	locks, errs := make([]seckill.Lock, len(names)), make([]error, len(names))
	for i, name := range names {
		m := l.ref(name)
		select {
		case m.ch <- struct{}{}:
			l.observer.Acquired(name, 0, false)
			locks[i] = &localLock{l: l, name: name, m: m, acquired: time.Now()}
		default:
			l.unref(name, m)
			errs[i] = fmt.Errorf("%w: local lock %q is held", seckill.ErrBusy, name)
			l.observer.AcquireFailed(name, 0, errs[i])
		}
	}
	return locks, errs
}

// ReleaseAll releases each lock.
func (l *localLocker) ReleaseAll(ctx context.Context, locks []seckill.Lock) []error {
	return releaseEach(ctx, locks)
}

// releaseEach releases locks one by one: ReleaseAll for the lock modes
// whose locks live in this process.
func releaseEach(ctx context.Context, locks []seckill.Lock) []error {
	errs := make([]error, len(locks))
	for i, lk := range locks {
		errs[i] = lk.Release(ctx)
	}
	return errs
}

// Ping has nothing to ask: the mutexes are in this process.
func (l *localLocker) Ping(context.Context) error { return nil }

func (l *localLocker) ref(name string) *localMutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.locks[name]
	if m == nil {
		m = &localMutex{ch: make(chan struct{}, 1)}
		l.locks[name] = m
	}
	m.refs++
	return m
}

func (l *localLocker) unref(name string, m *localMutex) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m.refs--; m.refs == 0 {
		delete(l.locks, name)
	}
}

// localLock is one holding of a local mutex.
type localLock struct {
	l        *localLocker
	name     string
	m        *localMutex
	acquired time.Time
	once     sync.Once
}

// Token is 0: an in-process mutex has no fencing token.
func (*localLock) Token() int64 { return 0 }

// Release unlocks the mutex; a second call reports lock.ErrNotHeld.
func (ll *localLock) Release(context.Context) error {
	released := false
	ll.once.Do(func() {
		<-ll.m.ch
		ll.l.unref(ll.name, ll.m)
		ll.l.observer.Released(ll.name, time.Since(ll.acquired))
		released = true
	})
	if !released {
		return fmt.Errorf("%w: local lock %q was already released", lock.ErrNotHeld, ll.name)
	}
	return nil
}

// noLocker is the none lock mode: every Acquire succeeds at once, so every
// buyer is in the critical section together.
type noLocker struct{}

func (noLocker) Acquire(context.Context, string) (seckill.Lock, error) { return noLock{}, nil }
func (noLocker) Ping(context.Context) error                            { return nil }

func (noLocker) TryAcquireAll(_ context.Context, names []string) ([]seckill.Lock, []error) {
	locks := make([]seckill.Lock, len(names))
	for i := range locks {
		locks[i] = noLock{}
	}
	return locks, make([]error, len(names))
}

func (noLocker) ReleaseAll(ctx context.Context, locks []seckill.Lock) []error {
	return releaseEach(ctx, locks)
}

// noLock is what noLocker hands out: no token, nothing to release.
type noLock struct{}

func (noLock) Token() int64                  { return 0 }
func (noLock) Release(context.Context) error { return nil }
