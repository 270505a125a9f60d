//go:build linux

package procutil

import (
	"runtime"
	"syscall"
)

// KillsWithParent reports whether the children Start guards with
// DefaultGuard die with this process even when it is killed: true on
// Linux, by the parent-death signal.
func KillsWithParent() bool { return true }

// run starts p.Cmd, reports the result on started, and waits for the
// child.
//
// The kernel sends the parent-death signal when the thread that forked the
// child exits, not when the process does (prctl(2), PR_SET_PDEATHSIG). The
// Go runtime ends an OS thread only when a goroutine locked to it returns
// without unlocking. So this goroutine locks its thread before forking and
// keeps it locked until the child has exited: the thread cannot end, nor be
// handed to another goroutine that might lock it and end it, while the
// child lives. The signal then fires when the whole process dies.
func run(p *Process, g Guard, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ownGroup(p.Cmd)
	if g == DefaultGuard {
		p.Cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	startAndWait(p, g == LifelineGuard, started)
}
