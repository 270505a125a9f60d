package handoff

import (
	"errors"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// ErrClosed is returned by a Locker after Close; package lock documents it.
var ErrClosed = errors.New("lock: locker closed")

// notAcquired wraps the reason an acquisition failed so that the error
// matches both ErrNotAcquired and cause.
func notAcquired(name string, cause error) error {
	return fmt.Errorf("%w: %q: %w", core.ErrNotAcquired, name, cause)
}

// Config is what the Locker needs of the lock's options.
type Config struct {
	Prefix          string
	TTL             time.Duration
	WaitTimeout     time.Duration // negative: until the context ends
	RecheckInterval time.Duration
	ClaimLease      time.Duration // the lease of a grant to another process
	// NoLocalRuns: every hold gets a lease of its own from Redis, never one
	// handed on in memory (renewal disabled, or replica acknowledgement).
	NoLocalRuns bool
	Lease       lease.Config
	Observer    Observer
	Test        TestControls
}

// Observer is told what the Locker does, for metrics; package lock
// documents it (its methods' arguments: the lock's name, how long the
// wait or the hold took, and whether the lock was contended, or the
// error).
type Observer interface {
	Acquired(string, time.Duration, bool)
	AcquireFailed(string, time.Duration, error)
	Released(string, time.Duration)
	lease.Observer
}

// TestControls break one safeguard each, or let a test observe or shorten a
// step. The zero value is the lock as documented; only package lock's
// tests set them.
type TestControls struct {
	// NoReleaseInference: a release whose first call's reply was lost
	// reports only what its second call saw.
	NoReleaseInference bool
	// AcquireIgnoresClose: Acquire returns what it won even when Close
	// began meanwhile.
	AcquireIgnoresClose bool
	// StopAllListeners: an ending driver's listeners stop every listener
	// of the lock's channel, also a newer driver's.
	StopAllListeners bool
	// HealthInterval, when set, replaces subscription.DefaultHealth.
	HealthInterval time.Duration
	// OnEvent, when set, is told of "subscribed" (a driver's listeners are
	// in place), "unsubscribe" (an ending driver is about to stop them)
	// and "unsubscribed", and of the lock's name, in that order.
	OnEvent func(string, string)
}
