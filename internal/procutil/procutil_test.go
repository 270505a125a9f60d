package procutil_test

import (
	"errors"
	"os/exec"
	"testing"

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
