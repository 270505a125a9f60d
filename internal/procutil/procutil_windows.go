//go:build windows

package procutil

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// job is the Job Object every child is put in, made at the first use. Its
// handle is never closed by this process: it closes when the process
// ends, however it ends, and Windows then ends every process in the job
// (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE). The handle is not inheritable, so
// no child keeps the job open after this process is gone.
var job = sync.OnceValues(func() (windows.Handle, error) {
	h, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, fmt.Errorf("procutil: create a job object: %w", err)
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(h, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(h)
		return 0, fmt.Errorf("procutil: make the job object kill its processes when closed: %w", err)
	}
	return h, nil
})

// KillsWithParent reports whether the children Start guards with
// DefaultGuard die with this process even when it is killed: on Windows,
// whether the job object could be made. When it could not, children are
// stopped by the normal clean-up only.
func KillsWithParent() bool {
	_, err := job()
	return err == nil
}

// run starts p.Cmd in a new process group (so that Terminate can send it
// a CTRL_BREAK alone), puts it in the job, reports the result on started,
// and waits for the child.
func run(p *Process, g Guard, started chan<- error) {
	if g == LifelineGuard {
		started <- fmt.Errorf("procutil: the lifeline guard needs a Unix shell: %w", errors.ErrUnsupported)
		return
	}
	if p.Cmd.SysProcAttr == nil {
		p.Cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	p.Cmd.SysProcAttr.CreationFlags |= syscall.CREATE_NEW_PROCESS_GROUP
	if err := p.Cmd.Start(); err != nil {
		started <- err
		return
	}
	if h, err := job(); g == DefaultGuard && err == nil {
		if err := assign(h, p.Cmd.Process.Pid); err != nil {
			// An unguarded child is what Start promises not to leave,
			// once the job exists.
			_ = p.Cmd.Process.Kill()
			_ = p.Cmd.Wait()
			started <- err
			return
		}
	}
	started <- nil
	p.err = p.Cmd.Wait()
	close(p.done)
}

// assign puts the process pid in the job.
func assign(job windows.Handle, pid int) error {
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err != nil {
		return fmt.Errorf("procutil: open pid %d to put it in the job object: %w", pid, err)
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		return fmt.Errorf("procutil: put pid %d in the job object: %w", pid, err)
	}
	return nil
}

// Terminate asks p to end: a CTRL_BREAK to its process group (Go programs
// see it as os.Interrupt), which reaches p if it shares this process's
// console; else, with no way to ask, Kill.
func Terminate(p *os.Process) error {
	if err := windows.GenerateConsoleCtrlEvent(windows.CTRL_BREAK_EVENT, uint32(p.Pid)); err != nil {
		return p.Kill()
	}
	return nil
}

// Interrupt is Terminate on Windows, where a Ctrl-C cannot be sent to one
// process group alone.
func Interrupt(p *os.Process) error { return Terminate(p) }

// Pause is not supported on Windows, which has no SIGSTOP.
func Pause(p *os.Process) error {
	return fmt.Errorf("procutil: pause pid %d: %w on windows", p.Pid, errors.ErrUnsupported)
}

// Resume is not supported on Windows, which has no SIGCONT.
func Resume(p *os.Process) error {
	return fmt.Errorf("procutil: resume pid %d: %w on windows", p.Pid, errors.ErrUnsupported)
}

// Exists reports whether a process with id pid is running (or belongs to
// another user, whom this process may not ask).
func Exists(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION|windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return errors.Is(err, windows.ERROR_ACCESS_DENIED)
	}
	defer windows.CloseHandle(h)
	ev, err := windows.WaitForSingleObject(h, 0)
	return err == nil && ev == uint32(windows.WAIT_TIMEOUT)
}
