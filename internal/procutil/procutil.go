// Package procutil starts the child processes of the tests, the fault suite
// and the demo (redis-server, PostgreSQL, `seckill serve` replicas, the go
// tool) so that none of them outlives the process that started it, and
// stops, pauses and resumes them the same way on every operating system.
//
// A test binary can end without running its clean-up: go test's -timeout,
// a CI runner or a second Ctrl-C kills it outright (SIGKILL, or
// TerminateProcess on Windows). Its children would then keep running,
// holding their ports and files. So Start also guards each child, and what
// is guaranteed when this process is killed depends on the system:
//
//   - Linux: the child gets SIGKILL as its parent-death signal
//     (PR_SET_PDEATHSIG): the kernel kills it when this process dies,
//     however it dies. If this process is already dead when the child
//     sets the signal, the child kills itself. Only the child is
//     signalled: its own children must end with it (PostgreSQL's backends
//     do), and a child that runs a set-user-ID program loses the signal.
//   - macOS and the BSDs, which have no parent-death signal: a lifeline
//     (lifeline_unix.go). A small /bin/sh watcher per child waits on a
//     pipe whose other end only this process holds; when this process
//     dies, the kernel closes that end, and the watcher kills the child's
//     whole process group. Not covered: a kill in the milliseconds between
//     the child's start and its watcher's; a child that leaves its process
//     group (setsid); a watcher killed by someone else.
//   - Windows: every child is put in one Job Object, made once per
//     process with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE. Only this process
//     holds the job's handle; when it dies the handle closes and Windows
//     ends every process in the job, the children's own children too. Not
//     covered: what the child starts, or a kill of this process, between
//     its creation and its assignment to the job. If the job cannot be
//     made, children are stopped by the normal clean-up only, and
//     KillsWithParent reports false.
//
// In every case each child runs in a process group of its own, so that a
// Ctrl-C in the terminal reaches only this process, which then stops its
// children itself, by PID: Terminate, Interrupt and Kill, and Pause and
// Resume for the fault suite's frozen processes.
package procutil

import (
	"os/exec"
	"sync/atomic"
)

// Process is a child started by Start.
type Process struct {
	// Cmd is the command; Cmd.Process is the running process and, after
	// Done is closed, Cmd.ProcessState its exit status.
	Cmd *exec.Cmd

	done chan struct{}
	err  error
}

// Done is closed once the process has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns cmd.Wait's error.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Guard is what makes a child die with this process when this process is
// killed before its clean-up.
type Guard int32

const (
	// DefaultGuard is the system's mechanism (the package doc): the
	// parent-death signal on Linux, the lifeline on other Unix systems,
	// the job object on Windows.
	DefaultGuard Guard = iota
	// NoGuard is none: a killed parent leaves its children running. The
	// orphan test's negative control uses it to show that its check can
	// fail.
	NoGuard
	// LifelineGuard is the lifeline on any Unix system, Linux included,
	// so that the mechanism macOS relies on is tested where the fault
	// suite runs. Start fails with it on Windows.
	LifelineGuard
)

func (g Guard) String() string {
	switch g {
	case DefaultGuard:
		return "default"
	case NoGuard:
		return "none"
	case LifelineGuard:
		return "lifeline"
	}
	return "unknown"
}

// guard is DefaultGuard except in the orphan tests.
var guard atomic.Int32

// SetGuard makes Start guard the processes it starts afterwards with g,
// and returns a function that restores the previous setting. It exists for
// the orphan tests, which run in a child test process of their own, where
// they choose the mechanism they check or switch it off for the negative
// control; nothing else calls it.
func SetGuard(g Guard) (restore func()) {
	old := guard.Swap(int32(g))
	return func() { guard.Store(old) }
}

// Start starts cmd in a process group of its own, guarded by the current
// Guard (DefaultGuard unless SetGuard changed it), and waits for it in the
// background: Done is closed when it has exited. Set cmd's I/O before
// calling. cmd.SysProcAttr may be nil or carry other settings (a
// credential, say); Start sets the fields its guard and the process group
// need (Setpgid and Pdeathsig on Unix, CreationFlags' new process group on
// Windows).
func Start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go run(p, Guard(guard.Load()), started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}
