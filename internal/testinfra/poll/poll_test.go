package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsWhenCondHolds(t *testing.T) {
	n := 0
	err := Until(t.Context(), time.Millisecond, func() (bool, error) { n++; return n == 3, nil })
	if err != nil || n != 3 {
		t.Errorf("got %v after %d calls, want nil after 3", err, n)
	}
}

func TestUntilStopsOnCondError(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	err := Until(t.Context(), time.Millisecond, func() (bool, error) { n++; return false, boom })
	if !errors.Is(err, boom) || n != 1 {
		t.Errorf("got %v after %d calls, want boom after 1", err, n)
	}
}

// The control: a condition that never holds must time out, not pass.
func TestUntilTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err := Until(ctx, time.Millisecond, func() (bool, error) { return false, nil })
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want ErrTimeout", err)
	}
}

func TestUntilNilNamesTheLastError(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err := UntilNil(ctx, time.Millisecond, func() error { return errors.New("link down") })
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "link down") {
		t.Errorf("got %v, want ErrTimeout naming link down", err)
	}
	if err := UntilNil(t.Context(), time.Millisecond, func() error { return nil }); err != nil {
		t.Errorf("got %v, want nil", err)
	}
}
