//go:build linux

package procutil_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
)

// TestThreadExitDoesNotKillChild shows the caveat of the parent-death
// signal and that Start handles it. One goroutine locks its OS thread,
// starts two children, and returns without unlocking, so the runtime ends
// that thread. The control child, started the plain way with Pdeathsig set,
// was forked on that thread and is killed with it, although this process
// lives on. The child started with Start was forked on Start's own thread,
// which stays while the child runs, and must survive.
func TestThreadExitDoesNotKillChild(t *testing.T) {
	// This goroutine keeps its own thread (most likely the main thread,
	// which the runtime never ends), so the one below runs on another.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var plain *exec.Cmd
	var viaStart *procutil.Process
	for attempt := 0; plain == nil; attempt++ {
		if attempt == 10 {
			t.Fatal("the goroutine ran on the main thread 10 times in a row")
		}
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			// The runtime never ends the main thread; try again elsewhere.
			if syscall.Gettid() == os.Getpid() {
				runtime.UnlockOSThread()
				errc <- nil
				return
			}
			// Returning while locked ends this thread.
			c := exec.Command("sleep", "60")
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := c.Start(); err != nil {
				errc <- err
				return
			}
			plain = c
			p, err := procutil.Start(exec.Command("sleep", "60"))
			viaStart = p
			errc <- err
		}()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	plainDone := make(chan struct{})
	var plainErr error
	go func() { plainErr = plain.Wait(); close(plainDone) }()
	t.Cleanup(func() {
		_ = plain.Process.Kill()
		<-plainDone
		if viaStart != nil {
			_ = viaStart.Cmd.Process.Kill()
			_ = viaStart.Wait()
		}
	})
	if viaStart == nil {
		t.Fatal("procutil.Start failed")
	}

	select {
	case <-plainDone:
		var exit *exec.ExitError
		if !errors.As(plainErr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("control child: got %v, want killed by SIGKILL", plainErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("control: the plainly started child outlived the thread that forked it; the caveat did not show")
	}
	// Both children would have been signalled at the same moment. SIGKILL
	// takes milliseconds; give the one from Start a whole second to die.
	select {
	case <-viaStart.Done():
		t.Fatalf("the child started by Start died with the thread: %v", viaStart.Wait())
	case <-time.After(time.Second):
	}
}
