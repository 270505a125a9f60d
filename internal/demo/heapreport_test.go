package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// Environment variables that TestMain (package demo_test) reads when this
// test binary is started as a replica.
const (
	// ServeEnv, set, makes the test binary a replica: app.Main.
	ServeEnv = "SECKILL_DEMO_TEST_SERVE"
	// HeapDirEnv, set to a directory, makes the replica report its live
	// heap there on SIGUSR1 (ReportHeapOnSignal).
	HeapDirEnv = "SECKILL_DEMO_TEST_HEAP_DIR"
)

// heapReport is what a replica process reports of its memory, after
// collecting its garbage.
type heapReport struct {
	// HeapAlloc is the bytes of live heap objects: after a collection,
	// what the process still references.
	HeapAlloc   uint64 `json:"heap_alloc"`
	HeapObjects uint64 `json:"heap_objects"`
	Goroutines  int    `json:"goroutines"`
	// RSS is the resident set (VmRSS), which also counts memory outside
	// Go's heap (SQLite's page cache, the stacks) and heap pages freed
	// but not yet returned to the kernel.
	RSS int64 `json:"rss"`
}

// ReportHeapOnSignal makes this process, on each heap signal (SIGUSR1,
// heapsignal_unix_test.go), collect its garbage twice (the second empties
// the sync.Pools the first moved to their victim caches), return freed
// pages to the kernel, and write a heapReport to dir/heap-<pid>.json,
// replacing the file whole. A replica started with HeapDirEnv calls it
// before it serves; it lasts until the process exits.
func ReportHeapOnSignal(dir string) {
	sig := make(chan os.Signal, 1)
	if !notifyHeapSignal(sig) {
		return
	}
	go func() {
		for range sig {
			runtime.GC()
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			r := heapReport{HeapAlloc: ms.HeapAlloc, HeapObjects: ms.HeapObjects, Goroutines: runtime.NumGoroutine(), RSS: selfRSS()}
			raw, _ := json.Marshal(r)
			path := heapFile(dir, os.Getpid())
			if os.WriteFile(path+".tmp", raw, 0o600) == nil {
				_ = os.Rename(path+".tmp", path)
			}
		}
	}()
}

func heapFile(dir string, pid int) string {
	return filepath.Join(dir, "heap-"+strconv.Itoa(pid)+".json")
}

// selfRSS is this process's VmRSS in bytes, or -1 where /proc has none.
func selfRSS() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

// heapReplica runs this test binary as a replica (ServeEnv) that reports
// its heap into dir on SIGUSR1.
func heapReplica(dir string) ReplicaCommand {
	return func() (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = []string{ServeEnv + "=1", HeapDirEnv + "=" + dir}
		return cmd, nil
	}
}

// readHeap asks the replica process pid, started by heapReplica(dir), for
// its heapReport and waits for it.
func readHeap(tb testing.TB, dir string, pid int) heapReport {
	tb.Helper()
	path := heapFile(dir, pid)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	if err := sendHeapSignal(pid); errors.Is(err, errors.ErrUnsupported) {
		tb.Skipf("heap report: %v", err)
	} else if err != nil {
		tb.Fatalf("signal replica process %d: %v", pid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r heapReport
	err := poll.Until(ctx, 10*time.Millisecond, func() (bool, error) {
		raw, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, json.Unmarshal(raw, &r)
	})
	if err != nil {
		tb.Fatalf("heap report of replica process %d: %v", pid, fmt.Errorf("%s: %w", path, err))
	}
	return r
}
