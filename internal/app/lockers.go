package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/lock"
)

var (
	_ seckill.Locker = redisLocker{}
	_ seckill.Lock   = (*lock.Lock)(nil)
)

// redisLocker adapts a *lock.Locker to the domain's Locker: a *lock.Lock is
// already a seckill.Lock; what needs translating is the error of a wait
// that ended, which the domain calls busy.
type redisLocker struct {
	locker  *lock.Locker
	clients []redis.UniversalClient
	quorum  int // how many must answer Ping: 1, or a Redlock majority
}

// Acquire waits for the lock. lock.ErrNotAcquired (the wait timed out, or
// the request's context ended) becomes seckill.ErrBusy; the lock package's
// error stays in the chain for the log. Other errors (Redis unreachable,
// the Locker closed) pass through and become 500s.
func (r redisLocker) Acquire(ctx context.Context, name string) (seckill.Lock, error) {
	lk, err := r.locker.Acquire(ctx, name)
	if errors.Is(err, lock.ErrNotAcquired) {
		return nil, fmt.Errorf("%w: %w", seckill.ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// TryAcquireAll tries every lock at once (lock.Locker.TryAcquireAll: one
// round trip); a lock held elsewhere becomes seckill.ErrBusy, as a wait
// that ended does in Acquire.
func (r redisLocker) TryAcquireAll(ctx context.Context, names []string) ([]seckill.Lock, []error) {
	locks, errs := r.locker.TryAcquireAll(ctx, names)
	out := make([]seckill.Lock, len(locks))
	for i, lk := range locks {
		switch {
		case lk != nil:
			out[i] = lk
		case errors.Is(errs[i], lock.ErrNotAcquired):
			errs[i] = fmt.Errorf("%w: %w", seckill.ErrBusy, errs[i])
		}
	}
	return out, errs
}

// ReleaseAll releases every lock at once (lock.Locker.ReleaseAll); each
// must be one this redisLocker handed out.
func (r redisLocker) ReleaseAll(ctx context.Context, locks []seckill.Lock) []error {
	lks := make([]*lock.Lock, len(locks))
	for i, lk := range locks {
		lks[i] = lk.(*lock.Lock)
	}
	return r.locker.ReleaseAll(ctx, lks)
}

// Ping asks every Redis master (every master of a Cluster, the current
// master behind Sentinel), and is content with a quorum of them: the lock
// works as long as that many answer.
func (r redisLocker) Ping(ctx context.Context) error {
	var errs []error
	for _, c := range r.clients {
		if err := ping(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	if up := len(r.clients) - len(errs); up < r.quorum {
		return fmt.Errorf("%d of %d Redis masters answer, %d needed: %w", up, len(r.clients), r.quorum, errors.Join(errs...))
	}
	return nil
}
