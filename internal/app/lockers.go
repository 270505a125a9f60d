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
