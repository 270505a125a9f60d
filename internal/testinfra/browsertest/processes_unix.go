//go:build unix && !linux

package browsertest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// processesUsing returns the processes other than this one with
// --user-data-dir=dir on their command line, as ps lists them (its
// arguments joined by spaces, so dir must hold none: t.TempDir's do not).
func processesUsing(dir string) ([]int, error) {
	out, err := exec.Command("ps", "-axww", "-o", "pid=", "-o", "args=").Output()
	if err != nil {
		return nil, fmt.Errorf("browsertest: ps: %w", err)
	}
	want := "--user-data-dir=" + dir
	var pids []int
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, arg := range f[1:] {
			if arg == want {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}
