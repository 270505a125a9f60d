//go:build windows

package pgproc

import (
	"errors"
	"fmt"
	"os/exec"
)

// supported says why servers are not started on Windows: postgres there
// is stopped through pg_ctl's named events, not by the signals Stop sends,
// and initdb's refusal of an administrator is not handled here.
func supported() error {
	return fmt.Errorf("pgproc: PostgreSQL test servers run on Linux and macOS, not on Windows: %w", errors.ErrUnsupported)
}

// runAs does nothing on Windows, where Start returns before using it.
func runAs(*exec.Cmd, *account) {}
