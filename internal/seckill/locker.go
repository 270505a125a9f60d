package seckill

import "context"

// Locker hands out the per-product locks that serialise purchases. The
// Redis lock (package lock, through an adapter in internal/app) is the real
// one; internal/app also has an in-process mutex and a no-op, to show what
// goes wrong without a distributed lock.
type Locker interface {
	// Acquire waits, for a bounded time, until it holds the lock called
	// name. A wait that ends without the lock returns an error matching
	// ErrBusy.
	Acquire(ctx context.Context, name string) (Lock, error)

	// TryAcquireAll tries each of names once, without waiting for any,
	// in one round trip where the lock service allows it, and returns the
	// Lock of each it took, or why not: an error matching ErrBusy for a
	// lock held elsewhere.
	TryAcquireAll(ctx context.Context, names []string) ([]Lock, []error)

	// ReleaseAll releases each of locks, as Lock.Release does, in one
	// round trip where the lock service allows it, and returns each
	// one's error.
	ReleaseAll(ctx context.Context, locks []Lock) []error

	// Ping reports whether the lock service answers, for readiness.
	Ping(ctx context.Context) error
}

// Lock is one holding of a lock, as package lock's Lock is.
type Lock interface {
	// Token is the fencing token of this holding: larger than the token of
	// every earlier holding of the same lock. Locks that cannot fence
	// return 0.
	Token() int64

	// Release gives the lock up. It reports when the lease was lost while
	// held; the caller cannot undo anything by then, which is why writes
	// are fenced.
	Release(ctx context.Context) error
}
