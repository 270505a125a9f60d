package antipattern

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// SeedLock is the usual correct but polling Redis lock: SET key uuid NX PX
// ttl to lock, the compare-and-delete script to unlock, and a lock() that
// retries every 10 ms until a wait time passes. It is correct (mutual
// exclusion, no deadlock, only the owner unlocks) but leaves the lease
// problem open (the lease can end while the work goes on) and polls: a waiter notices a
// release up to 10 ms late, and the goroutine that just released usually
// wins the next round while the others starve. It is the baseline of the
// lock package's benchmark.
type SeedLock struct {
	Client redis.UniversalClient
	TTL    time.Duration // usually 5 s
	Wait   time.Duration // usually 1 s
	Retry  time.Duration // usually 10 ms
}

// TryLock is one SET NX PX.
func (m *SeedLock) TryLock(ctx context.Context, key string) (string, bool, error) {
	return setNXPX(ctx, m.Client, key, m.TTL)
}

// Lock polls TryLock every Retry until it succeeds or Wait passes; ok is
// false when the wait ran out.
func (m *SeedLock) Lock(ctx context.Context, key string) (owner string, ok bool, err error) {
	deadline := time.Now().Add(m.Wait)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		owner, ok, err := m.TryLock(ctx, key)
		if err != nil || ok {
			return owner, ok, err
		}
		if !time.Now().Before(deadline) {
			return "", false, nil
		}
		t.Reset(m.Retry)
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-t.C:
		}
	}
}

// Unlock is the compare-and-delete script.
func (m *SeedLock) Unlock(ctx context.Context, key, owner string) error {
	return compareAndDelete.Run(ctx, m.Client, []string{key}, owner).Err()
}
