// Package antipattern keeps the common wrong Redis locks (docs/lock.md's
// References name the write-ups that describe them), each small and
// faithful to the usual code, so that tests and the load test can make each
// failure happen on demand. Each differs from the correct textbook lock,
// package seedlock, in one step.
//
// Do not use these to lock anything. Each type's comment says what it does
// and how it breaks; each has a hook where the harmful interleaving is
// injected (a pause, a crash, a skewed clock), so the failure is reproduced
// deterministically instead of hoped for.
package antipattern

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/seedlock"
)

// Mutex is what every lock here offers: one attempt to take key, and a
// release given what the attempt returned.
type Mutex interface {
	// TryLock makes one attempt; ok reports whether key is now held, and
	// owner is what Unlock needs.
	TryLock(ctx context.Context, key string) (owner string, ok bool, err error)
	// Unlock releases key.
	Unlock(ctx context.Context, key, owner string) error
}

// ErrCrashed is returned by a lock whose hook simulated a crash.
var ErrCrashed = errors.New("antipattern: simulated crash")

// SetNXThenExpire locks with SETNX and then EXPIRE, two commands. If the
// client dies between
// them, the key has no TTL and nobody can ever take the lock again: the
// "no deadlock" requirement is broken. SET key value NX PX ttl does both in
// one atomic command.
type SetNXThenExpire struct {
	Client redis.UniversalClient
	TTL    time.Duration
	// BetweenSetNXAndExpire runs after a successful SETNX. Returning an
	// error simulates the crash: EXPIRE is never sent.
	BetweenSetNXAndExpire func() error
}

// TryLock sends SETNX, runs the hook, then EXPIRE.
func (m *SetNXThenExpire) TryLock(ctx context.Context, key string) (string, bool, error) {
	owner := uuid.NewString()
	ok, err := m.Client.SetNX(ctx, key, owner, 0).Result()
	if err != nil || !ok {
		return "", false, err
	}
	if m.BetweenSetNXAndExpire != nil {
		if err := m.BetweenSetNXAndExpire(); err != nil {
			return "", false, err
		}
	}
	return owner, true, m.Client.Expire(ctx, key, m.TTL).Err()
}

// Unlock is the correct compare-and-delete: this type's flaw is in TryLock.
func (m *SetNXThenExpire) Unlock(ctx context.Context, key, owner string) error {
	return (&seedlock.Mutex{Client: m.Client}).Unlock(ctx, key, owner)
}

// ExpiryTimestamp stores the lock's expiry time as its value: SETNX, and
// when the key exists but its timestamp has passed, GETSET a new one and win
// if the old value is the one read. It has no owner identity, and it
// trusts every client's clock: a client whose clock runs ahead sees a live
// lock as expired and takes it while its holder still works. Besides, the
// losing GETSET overwrites the winner's expiry.
type ExpiryTimestamp struct {
	Client redis.UniversalClient
	TTL    time.Duration
	// Now is this client's clock; tests skew it. Default time.Now.
	Now func() time.Time
}

func (m *ExpiryTimestamp) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// TryLock is the SETNX / GET / GETSET dance, judged by m.Now.
func (m *ExpiryTimestamp) TryLock(ctx context.Context, key string) (string, bool, error) {
	expires := m.now().Add(m.TTL).UnixMilli()
	ok, err := m.Client.SetNX(ctx, key, expires, 0).Result()
	if err != nil || ok {
		return "", ok, err
	}
	cur, err := m.Client.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil || cur >= m.now().UnixMilli() {
		return "", false, err
	}
	old, err := m.Client.GetSet(ctx, key, expires).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", false, err
	}
	return "", old == cur, nil
}

// Unlock deletes the key. There is no owner to check: any client can
// release any holder's lock.
func (m *ExpiryTimestamp) Unlock(ctx context.Context, key, _ string) error {
	return m.Client.Del(ctx, key).Err()
}

// PlainDelete locks correctly (SET NX PX with a UUID) but unlocks with a
// plain DEL, whoever holds the lock. A holder
// whose lease expired while it worked deletes the lock of whoever took it
// next, and a third client then enters while the second still works.
type PlainDelete struct {
	Client redis.UniversalClient
	TTL    time.Duration
}

// TryLock is a correct SET NX PX with a fresh UUID.
func (m *PlainDelete) TryLock(ctx context.Context, key string) (string, bool, error) {
	return (&seedlock.Mutex{Client: m.Client, TTL: m.TTL}).TryLock(ctx, key)
}

// Unlock is the flaw: DEL, whoever holds the lock now.
func (m *PlainDelete) Unlock(ctx context.Context, key, _ string) error {
	return m.Client.Del(ctx, key).Err()
}

// GetThenDelete checks the owner with GET and then deletes with DEL, two
// commands. Between them the lease can expire and another client can
// acquire; the DEL then deletes that client's lock. The check and the delete
// must be one Lua script.
type GetThenDelete struct {
	Client redis.UniversalClient
	TTL    time.Duration
	// BetweenGetAndDel runs after GET found our owner and before DEL: where
	// a GC pause or a slow network lets the lease run out.
	BetweenGetAndDel func()
}

// TryLock is a correct SET NX PX with a fresh UUID.
func (m *GetThenDelete) TryLock(ctx context.Context, key string) (string, bool, error) {
	return (&seedlock.Mutex{Client: m.Client, TTL: m.TTL}).TryLock(ctx, key)
}

// Unlock is the flaw: GET, compare, hook, DEL in separate commands.
func (m *GetThenDelete) Unlock(ctx context.Context, key, owner string) error {
	cur, err := m.Client.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) || (err == nil && cur != owner) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.BetweenGetAndDel != nil {
		m.BetweenGetAndDel()
	}
	return m.Client.Del(ctx, key).Err()
}
