//go:build linux

package browsertest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// processesUsing returns the processes other than this one with
// --user-data-dir=dir on their command line, read from /proc.
func processesUsing(dir string) ([]int, error) {
	want := []byte("--user-data-dir=" + dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // ended meanwhile
		}
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}
