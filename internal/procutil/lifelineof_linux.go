//go:build linux

package procutil

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// LifelineOf is the PID of the lifeline watcher guarding the process pid
// (the /bin/sh whose last two arguments are "procutil-lifeline" and pid),
// found in /proc; 0 if there is none. Tests use it to check that a
// watcher starts and ends with its child, also one started by another
// process.
func LifelineOf(pid int) (int, error) {
	want := []byte("\x00procutil-lifeline\x00" + strconv.Itoa(pid) + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		w, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasSuffix(cmdline, want) {
			return w, nil
		}
	}
	return 0, nil
}
