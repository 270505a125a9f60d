// Package seedlock is the textbook Redis lock that package lock starts
// from: SET key uuid NX PX ttl to lock, a compare-and-delete script to
// unlock, and a Lock that polls every few milliseconds until a wait runs
// out. It meets the usual requirements (mutual exclusion; no deadlock, as
// the lease is set in the same command; only the owner unlocks, as each
// holder has its own UUID), and it is the baseline of this repository's
// benchmarks.
//
// It leaves open what package lock adds: the lease can end while the work
// goes on (no renewal, no report of the loss, no fencing token), and
// waiting is polling: a waiter notices a release up to one retry late, and
// the goroutine that just released usually wins the next round while the
// others starve.
package seedlock

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Mutex is the polling lock on one Redis deployment.
type Mutex struct {
	Client redis.UniversalClient
	TTL    time.Duration // the lease; usually 5 s
	Wait   time.Duration // how long Lock polls; usually 1 s
	Retry  time.Duration // between two attempts; usually 10 ms
}

// TryLock is one SET key owner NX PX TTL, under a fresh UUID: ok reports
// whether key is now held, and owner is what Unlock needs.
func (m *Mutex) TryLock(ctx context.Context, key string) (owner string, ok bool, err error) {
	owner = uuid.NewString()
	ok, err = m.Client.SetNX(ctx, key, owner, m.TTL).Result()
	if err != nil || !ok {
		return "", false, err
	}
	return owner, true, nil
}

// Lock polls TryLock every Retry until it succeeds or Wait passes; ok is
// false when the wait ran out.
func (m *Mutex) Lock(ctx context.Context, key string) (owner string, ok bool, err error) {
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

// Unlock deletes key only if it still holds owner, in one script: a plain
// DEL, or GET then DEL, would delete the lock of whoever took it after the
// caller's lease ran out.
func (m *Mutex) Unlock(ctx context.Context, key, owner string) error {
	return compareAndDelete.Run(ctx, m.Client, []string{key}, owner).Err()
}

var compareAndDelete = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`)
