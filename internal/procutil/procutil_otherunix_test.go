//go:build unix && !linux

package procutil_test

import (
	"os/exec"
	"strconv"
	"strings"
)

// running reports whether pid is a running process: it exists and is not
// a zombie (dead, waiting for whoever adopted it to reap it).
func running(pid int) bool {
	if pid == 0 {
		return false
	}
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	st := strings.TrimSpace(string(out))
	return err == nil && st != "" && !strings.HasPrefix(st, "Z")
}
