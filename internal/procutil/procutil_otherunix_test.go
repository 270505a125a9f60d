//go:build unix && !linux

package procutil_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// watcherOf finds the lifeline watcher of the child pid by its command
// line (its last two arguments are "procutil-lifeline" and pid), as ps
// lists it; 0 if there is none.
func watcherOf(t *testing.T, pid int) int {
	t.Helper()
	out, err := exec.Command("ps", "-axww", "-o", "pid=", "-o", "args=").Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 2 && f[len(f)-2] == "procutil-lifeline" && f[len(f)-1] == strconv.Itoa(pid) {
			w, _ := strconv.Atoi(f[0])
			return w
		}
	}
	return 0
}

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
