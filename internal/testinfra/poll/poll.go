// Package poll awaits a condition with a deadline, the one way the tests
// wait for something to happen: a server to answer, a lock to expire, a
// replica to be promoted. It checks the condition, never lets time pass
// blindly, and says what it was waiting for when the deadline comes first.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrTimeout is what Until returns when ctx ends before cond holds.
var ErrTimeout = errors.New("condition not met before the deadline")

// Until calls cond at once and then every interval until it returns true
// or an error, or ctx ends. An error from cond ends the wait with that
// error; a cond that cannot tell yet (a server that is not answering)
// returns false, nil. When ctx ends first, the error wraps ErrTimeout.
func Until(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%v)", ErrTimeout, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// UntilNil is Until for a cond whose error means "not yet": it waits for
// cond to return nil, and when ctx ends first the error names cond's last
// error.
func UntilNil(ctx context.Context, interval time.Duration, cond func() error) error {
	var last error
	err := Until(ctx, interval, func() (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w; last: %v", err, last)
	}
	return nil
}

// Interval is how often Eventually checks its condition.
const Interval = 2 * time.Millisecond

// Eventually fails t if cond does not hold within timeout; what names the
// condition in the failure. It must be called from the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Until(ctx, Interval, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
