package lock

import (
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/handoff"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/replicas"
)

var (
	// ErrNotAcquired means the lock was not obtained: TryAcquire found it
	// held, Acquire's wait ended, or Redis could not be asked. The error
	// also matches its cause: when the wait ended because a context ended,
	// both errors.Is(err, ErrNotAcquired) and errors.Is(err,
	// context.Canceled) (or context.DeadlineExceeded) hold; when Redis
	// failed, the error matches go-redis's error.
	ErrNotAcquired = core.ErrNotAcquired

	// ErrNotHeld means a Release or Extend found the lock no longer owned by
	// the caller: the lease ran out (and perhaps someone else holds it now),
	// or it was already released. The call did not change who holds the
	// lock. (A Release still does its other work: it queues this process
	// again for its other waiting goroutines, and hands a free lock to the
	// next process in line.)
	ErrNotHeld = core.ErrNotHeld

	// ErrLeaseLost is why a Lock's Lost channel closed and its contexts were
	// cancelled: renewal found another owner, or the lease ran out before a
	// renewal succeeded. It matches ErrNotHeld.
	ErrLeaseLost = lease.ErrLeaseLost

	// ErrNotReplicated means the lock was taken on the master but too few
	// replicas acknowledged it in time (Options.WaitReplicas), so it was
	// released again. It matches ErrNotAcquired.
	ErrNotReplicated = replicas.ErrNotReplicated

	// ErrClosed is returned by a Locker after Close.
	ErrClosed = handoff.ErrClosed
)
