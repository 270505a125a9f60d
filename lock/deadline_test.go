package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// Lock.Deadline is a time until which the lease certainly lasts in Redis:
// never later than the key's expiry. Redis keeps leases in whole
// milliseconds; a Locker that sent the scripts TTL.Milliseconds() but added
// the exact TTL to its deadlines would, for a TTL that is not a whole
// number of milliseconds (any TTL of at least 10 ms is accepted), report a
// deadline up to a millisecond past the key's expiry after every renewal,
// while another process can already take the lock. The test extends, then
// polls the key: Redis answering that it is gone before Deadline shows the
// overshoot. The control keeps the sub-millisecond part of the TTL.

func TestDeadlineAfterExtendIsNoLaterThanTheKeysExpiry(t *testing.T) {
	t.Parallel()
	if err := deadlineAfterExtend(t); err != nil {
		t.Error(err)
	}
}

func TestDeadlineAfterExtendControlSubMillisecondTTL(t *testing.T) {
	mustCatch(t, lock.KeepSubMillisecond,
		"with the TTL's sub-millisecond part kept, no Deadline past the key's expiry was seen: the test would not catch it", deadlineAfterExtend)
}

// deadlineAfterExtend returns the first trial whose Deadline came after
// Redis answered that the key had expired, or nil after 50 trials.
func deadlineAfterExtend(t *testing.T) error {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	const ttl = 10*time.Millisecond + 900*time.Microsecond
	l := newLocker(t, srv, lock.Options{TTL: ttl, DisableRenewal: true})
	for trial := range 50 {
		lk := mustAcquire(t, l, "res")
		if err := lk.Extend(ctx); err != nil {
			_ = lk.Release(ctx)
			continue // the machine was too slow for this trial
		}
		deadline := lk.Deadline()
		for time.Now().Before(deadline) {
			n, err := admin.Exists(ctx, lockKey("res")).Result()
			answered := time.Now()
			if err == nil && n == 0 && answered.Before(deadline) {
				_ = lk.Release(ctx)
				return fmt.Errorf("trial %d: the Lock's Deadline is %v after Redis answered that the key had expired (TTL %v, sent to Redis as %d ms)",
					trial, deadline.Sub(answered), ttl, ttl.Milliseconds())
			}
		}
		_ = lk.Release(ctx)
	}
	return nil
}
