//go:build unix

package pgproc

import (
	"os/exec"
	"syscall"
)

// supported is nil: servers run on every Unix system.
func supported() error { return nil }

// runAs makes cmd run as as, when set; procutil.Start adds its own fields
// to the same SysProcAttr.
func runAs(cmd *exec.Cmd, as *account) {
	if as == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(as.uid), Gid: uint32(as.gid)}}
}
