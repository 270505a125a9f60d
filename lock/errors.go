package lock

import (
	"errors"
	"fmt"
)

var (
	// ErrNotAcquired means the lock was not obtained: TryAcquire found it
	// held, Acquire's wait ended, or Redis could not be asked. The error
	// also matches its cause: when the wait ended because a context ended,
	// both errors.Is(err, ErrNotAcquired) and errors.Is(err,
	// context.Canceled) (or context.DeadlineExceeded) hold; when Redis
	// failed, the error matches go-redis's error.
	ErrNotAcquired = errors.New("lock: not acquired")

	// ErrNotHeld means a Release or Extend found the lock no longer owned by
	// the caller: the lease ran out (and perhaps someone else holds it now),
	// or it was already released. The call did not change who holds the
	// lock. (A Release still does its other work: it queues this process
	// again for its other waiting goroutines, and hands a free lock to the
	// next process in line.)
	ErrNotHeld = errors.New("lock: not held")

	// ErrLeaseLost is why a Lock's Lost channel closed and its contexts were
	// cancelled: renewal found another owner, or the lease ran out before a
	// renewal succeeded. It matches ErrNotHeld.
	ErrLeaseLost = fmt.Errorf("%w: lease lost", ErrNotHeld)

	// ErrNotReplicated means the lock was taken on the master but too few
	// replicas acknowledged it in time (Options.WaitReplicas), so it was
	// released again. It matches ErrNotAcquired.
	ErrNotReplicated = fmt.Errorf("%w: too few replicas acknowledged", ErrNotAcquired)

	// ErrClosed is returned by a Locker after Close.
	ErrClosed = errors.New("lock: locker closed")
)

// notAcquired wraps the reason a wait ended so that the error matches both
// ErrNotAcquired and cause (redsync #164 and bsm/redislock #79 ask for this).
func notAcquired(name string, cause error) error {
	return fmt.Errorf("%w: %q: %w", ErrNotAcquired, name, cause)
}
