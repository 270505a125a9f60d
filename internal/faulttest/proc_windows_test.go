//go:build windows

package faulttest

import (
	"errors"
	"fmt"
)

// canInspect: the orphan test reads processes' states and start times,
// which it does from /proc or ps only.
func canInspect() error {
	return fmt.Errorf("faulttest: the orphan test reads process states from /proc or ps: %w on windows", errors.ErrUnsupported)
}

type stat struct{ state, start string }

func procStat(int) (stat, bool) { return stat{}, false }
