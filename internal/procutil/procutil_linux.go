//go:build linux

package procutil

import (
	"runtime"
	"syscall"
)

// ParentDeathSignal reports whether children die with this process even
// when it is killed: true on Linux.
const ParentDeathSignal = true

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
func run(p *Process, pdeathsig bool, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if pdeathsig {
		p.Cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := p.Cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	p.err = p.Cmd.Wait()
	close(p.done)
}
