//go:build unix

package procutil_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// The lifeline tests run a parent in a child test process (this test
// binary again, running only TestLifelineParent), which starts a shell
// with a child of its own in the shell's process group, and is then
// killed with SIGKILL.
const (
	// lifelineParentEnv is the file the parent writes the shell's and the
	// sleep's PIDs to; set, it makes TestLifelineParent run.
	lifelineParentEnv = "PROCUTIL_LIFELINE_PARENT"
	// lifelineGuardEnv is the guard the parent starts the shell with.
	lifelineGuardEnv = "PROCUTIL_LIFELINE_GUARD"
)

// The lifeline kills the whole process group of a child whose parent is
// killed: the shell Start started and the sleep the shell started. Its
// watcher exits once it has.
func TestLifelineKillsTheGroupOfAKilledParent(t *testing.T) {
	killedParent(t, procutil.LifelineGuard)
}

// Control: with no guard the same processes outlive their killed parent,
// which shows that the check above would see them.
func TestLifelineControlNoGuardLeavesTheGroup(t *testing.T) {
	killedParent(t, procutil.NoGuard)
}

func killedParent(t *testing.T, g procutil.Guard) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLifelineParent$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), lifelineParentEnv+"="+pidFile, lifelineGuardEnv+"="+g.String())
	var out procutil.TailBuffer
	out.Max = 4 << 10
	cmd.Stdout, cmd.Stderr = &out, &out
	parent, err := procutil.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = parent.Cmd.Process.Kill()
		_ = parent.Wait()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var pids []int
	err = poll.Until(ctx, 10*time.Millisecond, func() (bool, error) {
		select {
		case <-parent.Done():
			return false, fmt.Errorf("the parent exited early (%v): %s", parent.Cmd.ProcessState, out.String())
		default:
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false, nil
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return false, fmt.Errorf("%s: %q", pidFile, b)
			}
			pids = append(pids, pid)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the parent's child: %v", err)
	}
	if len(pids) != 2 {
		t.Fatalf("got pids %v, want the shell's and the sleep's", pids)
	}
	for _, pid := range pids {
		t.Cleanup(func() { killGone(t, pid) })
	}
	watcher := 0
	if g == procutil.LifelineGuard {
		if watcher = watcherOf(t, pids[0]); watcher == 0 {
			t.Fatalf("no lifeline watcher for pid %d", pids[0])
		}
		t.Cleanup(func() { killGone(t, watcher) })
	}

	if err := parent.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()

	if g == procutil.NoGuard {
		// Look for a second: a watcher's kill takes milliseconds.
		time.Sleep(time.Second)
		for _, pid := range pids {
			if !running(pid) {
				t.Errorf("pid %d died with its parent, though it had no guard", pid)
			}
		}
		return
	}
	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = poll.Until(ctx, 10*time.Millisecond, func() (bool, error) {
		return !running(pids[0]) && !running(pids[1]) && !running(watcher), nil
	})
	if err != nil {
		t.Fatalf("after SIGKILL of their parent: shell (pid %d) running %v, its sleep (pid %d) %v, the watcher (pid %d) %v",
			pids[0], running(pids[0]), pids[1], running(pids[1]), watcher, running(watcher))
	}
}

// TestLifelineParent is the parent of the lifeline tests: it starts a
// shell that starts a sleep, writes both PIDs to the file it was given,
// and waits to be killed. It does nothing in a normal run.
func TestLifelineParent(t *testing.T) {
	pidFile := os.Getenv(lifelineParentEnv)
	if pidFile == "" {
		t.Skip("the child process of TestLifeline*; runs only when started by it")
	}
	switch g := os.Getenv(lifelineGuardEnv); g {
	case procutil.LifelineGuard.String():
		procutil.SetGuard(procutil.LifelineGuard)
	case procutil.NoGuard.String():
		procutil.SetGuard(procutil.NoGuard)
	default:
		t.Fatalf("unknown guard %q", g)
	}
	// The file appears whole or not at all.
	sh := exec.Command("/bin/sh", "-c", `sleep 300 & echo $$ $! > "$1.tmp" && mv "$1.tmp" "$1"; wait`, "sh", pidFile)
	p, err := procutil.Start(sh)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		t.Fatalf("the shell exited: %v", p.Wait())
	case <-time.After(time.Minute):
		t.Fatal("not killed within a minute")
	}
}

// At a normal end the lifeline is cut without firing: once the child has
// been waited for, its watcher is gone and a process the child left in
// its group still runs (the watcher would have killed it). That cut kills
// the watcher before closing the pipe is not shown here: closed first,
// the pipe races the kill, which usually wins.
func TestLifelineCutAtNormalEnd(t *testing.T) {
	defer procutil.SetGuard(procutil.LifelineGuard)()
	pidFile := filepath.Join(t.TempDir(), "pid")
	sh := exec.Command("/bin/sh", "-c", `sleep 300 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 300`, "sh", pidFile)
	p, err := procutil.Start(sh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		_ = p.Wait()
	})
	watcher := watcherOf(t, p.Pid())
	if watcher == 0 {
		t.Fatalf("no lifeline watcher for pid %d", p.Pid())
	}
	t.Cleanup(func() { killGone(t, watcher) })
	sleep := 0
	poll.Eventually(t, 10*time.Second, "the shell to write its sleep's pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			sleep, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err == nil
	})
	t.Cleanup(func() { killGone(t, sleep) })

	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.Wait()
	if running(watcher) || procutil.Exists(watcher) {
		t.Errorf("the watcher (pid %d) outlived its child's end, or was not reaped", watcher)
	}
	time.Sleep(200 * time.Millisecond) // a watcher that fired kills in milliseconds
	if !running(sleep) {
		t.Errorf("the sleep (pid %d) left in the child's group was killed: the lifeline fired at a normal end", sleep)
	}
}

// killGone kills pid if it still runs, for the clean-up of a test that
// failed: none of these processes is this process's child by then.
func killGone(t *testing.T, pid int) {
	if !running(pid) {
		return
	}
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill pid %d: %v", pid, err)
	}
}

// watcherOf is the PID of the lifeline watcher of the child pid, 0 if
// there is none.
func watcherOf(t *testing.T, pid int) int {
	t.Helper()
	w, err := procutil.LifelineOf(pid)
	if err != nil {
		t.Fatalf("looking for the lifeline of pid %d: %v", pid, err)
	}
	return w
}
