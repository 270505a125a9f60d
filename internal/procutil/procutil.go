// Package procutil starts the child processes of the tests, the fault suite
// and the demo (redis-server, `seckill serve` replicas, the go tool) so that
// none of them outlives the process that started it.
//
// A test binary can end without running its clean-up: go test's -timeout,
// a CI runner or a second Ctrl-C kills it with SIGKILL. Its children would
// then keep running, holding their ports and files. On Linux every child
// therefore gets a parent-death signal (SIGKILL): the kernel kills the child
// when its parent dies, however the parent dies. Elsewhere only the normal
// clean-up (stop by PID) applies.
package procutil

import (
	"os/exec"
	"sync/atomic"
	"syscall"
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

// parentDeathSignal is on except in the test that shows what it prevents.
var parentDeathSignal atomic.Bool

func init() { parentDeathSignal.Store(true) }

// SetParentDeathSignal switches the parent-death signal on or off for
// processes started afterwards and returns a function that restores the
// previous setting. It exists for the negative control of the orphan test,
// which must show children outliving a killed parent without the signal;
// nothing else calls it.
func SetParentDeathSignal(on bool) (restore func()) {
	old := parentDeathSignal.Swap(on)
	return func() { parentDeathSignal.Store(old) }
}

// Start starts cmd in a process group of its own, so that a Ctrl-C in the
// terminal reaches only this process, which then stops its children itself,
// by PID. On Linux the child also gets SIGKILL as its parent-death signal.
// Start waits for the child in the background: Done is closed when it has
// exited. Set cmd's I/O before calling; leave cmd.SysProcAttr nil or set
// only fields other than Setpgid and Pdeathsig.
func Start(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go run(p, parentDeathSignal.Load(), started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}
