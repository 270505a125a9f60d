//go:build unix

package procutil

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// A lifeline guards a child where the system has no parent-death signal.
// Its watcher is a shell whose standard input is the read end of a pipe;
// this process holds the write end and never writes. When this process
// dies, however it dies, the kernel closes the write end, read sees end
// of file, and the watcher kills the child's process group (the child's
// PID, since Start gives it a group of its own), the child's own children
// in that group too.
//
// The pipe's ends are close-on-exec (os.Pipe), so no other child, and no
// other watcher, inherits the write end and keeps the pipe open after this
// process dies. The watcher has a process group of its own, so a Ctrl-C in
// the terminal does not end it before its child.
//
// "read" returns non-zero only at end of file (or on an error, which also
// means this end is unusable); a stray line would only run the loop again.
// Both read and kill are shell built-ins, in dash, bash and the BSD sh
// alike.
const lifelineScript = `while read -r _; do :; done; kill -s KILL -- "-$1"`

// lifeline is one child's watcher and the write end of its pipe.
type lifeline struct {
	w       *os.File
	watcher *exec.Cmd
}

// startLifeline starts a watcher that kills the process group pgid when
// this process dies.
func startLifeline(pgid int) (*lifeline, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("procutil: the lifeline of pid %d: %w", pgid, err)
	}
	cmd := exec.Command("/bin/sh", "-c", lifelineScript, "procutil-lifeline", strconv.Itoa(pgid))
	cmd.Stdin = r
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = r.Close() // the watcher has its own copy
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("procutil: start the lifeline of pid %d: %w", pgid, err)
	}
	return &lifeline{w: w, watcher: cmd}, nil
}

// cut ends the lifeline after its child has been waited for. The watcher
// is killed and reaped before the pipe is closed: closed first, the pipe
// would make the watcher kill a process group whose id the system may
// already have given to someone else.
func (l *lifeline) cut() {
	_ = l.watcher.Process.Kill()
	_ = l.watcher.Wait()
	_ = l.w.Close()
}
