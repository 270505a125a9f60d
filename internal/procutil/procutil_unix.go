//go:build unix

package procutil

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ownGroup puts cmd's process in a new process group, whose id is its
// PID.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// startAndWait starts p.Cmd, with a lifeline if asked, reports the result
// on started, and waits for the child. The lifeline is cut only after the
// child has been waited for, so the child is guarded as long as it runs.
func startAndWait(p *Process, withLifeline bool, started chan<- error) {
	if err := p.Cmd.Start(); err != nil {
		started <- err
		return
	}
	var l *lifeline
	if withLifeline {
		var err error
		if l, err = startLifeline(p.Cmd.Process.Pid); err != nil {
			// An unguarded child is what Start promises not to leave.
			_ = p.Cmd.Process.Kill()
			_ = p.Cmd.Wait()
			started <- err
			return
		}
	}
	started <- nil
	p.err = p.Cmd.Wait()
	if l != nil {
		l.cut()
	}
	close(p.done)
}

// Terminate asks p to end: SIGTERM.
func Terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// Interrupt asks p to end as a Ctrl-C would: SIGINT (PostgreSQL's fast
// shutdown).
func Interrupt(p *os.Process) error { return p.Signal(syscall.SIGINT) }

// Pause stops p where it is, with its connections open and its timers
// frozen: SIGSTOP. Resume continues it.
func Pause(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a process stopped by Pause: SIGCONT. A process that
// runs is not affected.
func Resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// Exists reports whether a process with id pid exists, as kill(pid, 0)
// does: also a zombie, and a process of another user (EPERM).
func Exists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
