//go:build unix && !linux

package procutil

import (
	"os/exec"
	"strconv"
	"strings"
)

// LifelineOf is the PID of the lifeline watcher guarding the process pid
// (the /bin/sh whose last two arguments are "procutil-lifeline" and pid),
// as ps lists it; 0 if there is none. Tests use it to check that a
// watcher starts and ends with its child, also one started by another
// process.
func LifelineOf(pid int) (int, error) {
	out, err := exec.Command("ps", "-axww", "-o", "pid=", "-o", "args=").Output()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 2 && f[len(f)-2] == "procutil-lifeline" && f[len(f)-1] == strconv.Itoa(pid) {
			w, _ := strconv.Atoi(f[0])
			return w, nil
		}
	}
	return 0, nil
}
