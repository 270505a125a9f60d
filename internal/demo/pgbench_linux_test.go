//go:build linux

package demo

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
)

// serverCPU is the CPU time pg's processes have used so far: the
// postmaster's own and that of its children, those that ended (which the
// postmaster has waited for) and those still running (the backends of the
// replicas' open connections), read from /proc. 0 when pg is nil; ok is
// true.
func serverCPU(b *testing.B, pg *pgproc.Server) (_ time.Duration, ok bool) {
	b.Helper()
	if pg == nil {
		return 0, true
	}
	main := pg.PID()
	stat := func(pid string) []string {
		raw, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return nil // a backend that ended meanwhile
		}
		// The command name, in parentheses, may hold spaces: the fields
		// after it are space-separated. Field 4 (ppid) is at index 1.
		return strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	}
	ticks := func(f []string, fields ...int) (n int64) {
		for _, i := range fields {
			v, _ := strconv.ParseInt(f[i-3], 10, 64)
			n += v
		}
		return n
	}
	// utime, stime, cutime, cstime are fields 14 to 17 (man 5 proc).
	var total int64
	if f := stat(strconv.Itoa(main)); f != nil {
		total += ticks(f, 14, 15, 16, 17)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if f := stat(p.Name()); f != nil && f[1] == strconv.Itoa(main) {
			total += ticks(f, 14, 15)
		}
	}
	// The kernel counts in USER_HZ, 100 on Linux.
	return time.Duration(total) * 10 * time.Millisecond, true
}
