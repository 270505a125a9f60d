//go:build linux

package faulttest

import (
	"os"
	"strconv"
	"strings"
)

// canInspect is nil: /proc shows every process.
func canInspect() error { return nil }

// stat is what the orphan test reads of a process.
type stat struct {
	state string // R, S, D, T, Z...
	start string // start time, in clock ticks since boot
}

// procStat reads /proc/<pid>/stat; ok is false when there is no such
// process.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses,
	// so the fields are counted from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return stat{}, false
	}
	return stat{state: f[0], start: f[19]}, true // fields 3 and 22
}
