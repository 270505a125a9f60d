//go:build windows

package browsertest

import (
	"errors"
	"fmt"
)

// processesUsing cannot read other processes' command lines on Windows
// without more than this package needs.
func processesUsing(string) ([]int, error) {
	return nil, fmt.Errorf("browsertest: listing Chromium's processes by command line needs /proc or ps: %w on windows", errors.ErrUnsupported)
}
