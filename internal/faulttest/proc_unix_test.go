//go:build unix && !linux

package faulttest

import (
	"os/exec"
	"strconv"
	"strings"
)

// canInspect says whether ps, which shows the processes here, is on PATH.
func canInspect() error {
	_, err := exec.LookPath("ps")
	return err
}

// stat is what the orphan test reads of a process.
type stat struct {
	state string // R, S, T, Z...
	start string // start time, to the second
}

// procStat asks ps for pid's state and start time; ok is false when there
// is no such process.
func procStat(pid int) (stat, bool) {
	out, err := exec.Command("ps", "-o", "stat=", "-o", "lstart=", "-p", strconv.Itoa(pid)).Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) < 2 {
		return stat{}, false
	}
	return stat{state: f[0][:1], start: strings.Join(f[1:], " ")}, true
}
