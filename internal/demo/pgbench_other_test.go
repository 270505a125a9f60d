//go:build !linux

package demo

import (
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
)

// serverCPU would read the CPU time of pg's processes from /proc, which
// only Linux has: ok is false, and the benchmark reports no pg-cpu-%.
func serverCPU(*testing.B, *pgproc.Server) (_ time.Duration, ok bool) { return 0, false }
