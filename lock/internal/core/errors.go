package core

import (
	"errors"
	"fmt"
)

// The errors of the core; package lock documents them.
var (
	ErrNotAcquired = errors.New("lock: not acquired")
	ErrNotHeld     = errors.New("lock: not held")
)

// NotAcquired wraps the reason a wait ended so that the error matches both
// ErrNotAcquired and cause (redsync #164 and bsm/redislock #79 ask for this).
func NotAcquired(name string, cause error) error {
	return fmt.Errorf("%w: %q: %w", ErrNotAcquired, name, cause)
}
