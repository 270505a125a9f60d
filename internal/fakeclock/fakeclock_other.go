//go:build !linux

package fakeclock

import (
	"errors"
	"os"
	"runtime"
)

// needsLinux is New's error outside Linux. Every caller (the tests, the
// demo's matrix) skips what needs the clock when it gets it, and its
// message is the one line they skip with.
type needsLinux struct{}

func (needsLinux) Error() string {
	return "fakeclock: needs Linux (LD_PRELOAD); skipped on " + runtime.GOOS
}

func (needsLinux) Is(target error) bool { return target == errors.ErrUnsupported }

func supported() error { return needsLinux{} }

// mapShared and unmap are never called: New returns first.
func mapShared(*os.File, int) ([]byte, error) { return nil, supported() }

func unmap([]byte) error { return supported() }
