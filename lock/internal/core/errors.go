package core

import "errors"

// The errors of the core; package lock documents them.
var (
	ErrNotAcquired = errors.New("lock: not acquired")
	ErrNotHeld     = errors.New("lock: not held")
)
