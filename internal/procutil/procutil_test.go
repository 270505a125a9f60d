package procutil_test

import (
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
)

func TestStartAndWait(t *testing.T) {
	p, err := procutil.Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait: got %v, want exit status 3", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Wait")
	}
	if _, err := procutil.Start(exec.Command("/nonexistent/binary")); err == nil {
		t.Fatal("Start of a missing binary: got nil error")
	}
}

// Terminate ends a process that does nothing about it; Exists sees it
// until it has been waited for.
func TestTerminateAndExists(t *testing.T) {
	p, err := procutil.Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if !procutil.Exists(pid) {
		t.Fatalf("Exists(%d) of a running child: got false", pid)
	}
	if err := procutil.Terminate(p.Cmd.Process); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		t.Fatal("the child outlived Terminate by 10s")
	}
	if procutil.Exists(pid) {
		t.Errorf("Exists(%d) of a reaped child: got true", pid)
	}
}

// A paused process makes no progress until it is resumed; where pausing
// is not supported, Pause says so with errors.ErrUnsupported.
func TestPauseResume(t *testing.T) {
	p, err := procutil.Start(exec.Command("sleep", "0.2"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = p.Cmd.Process.Kill()
		_ = p.Wait()
	}()
	err = procutil.Pause(p.Cmd.Process)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("procutil: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		t.Fatal("a paused sleep 0.2 ended within 1s")
	case <-time.After(time.Second):
	}
	if err := procutil.Resume(p.Cmd.Process); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed sleep did not end within 10s")
	}
}
