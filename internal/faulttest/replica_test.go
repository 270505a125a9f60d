package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// Deadlines. They are generous because the machine may be a loaded 2-core
// box running other test binaries at the same time; each bounds a wait for
// a condition that is polled, never a sleep.
const (
	readyTimeout = 30 * time.Second // a replica answers /readyz
	stopGrace    = 10 * time.Second // SIGTERM to exit, before SIGKILL
	// shutdownTimeout is the replicas' SHUTDOWN_TIMEOUT: a replica stopped
	// in clean-up may still have requests waiting for a lock, and they need
	// not be answered.
	shutdownTimeout = "2s"
	logTail         = 40 // log lines shown for each replica when a test fails
)

// replica is one `seckill serve` process on a loopback port, with its own
// log file. It is stopped by PID when the test ends.
type replica struct {
	name    string
	url     string // http://127.0.0.1:port
	logPath string

	cmd    *exec.Cmd
	exited <-chan struct{} // closed once the process has been waited for; nil before start
}

// startReplica runs `seckill serve` with env (on top of the defaults of
// baseEnv) on a free 127.0.0.1 port, and returns when /readyz answers 200.
// The process is stopped in t.Cleanup, also when the test fails; if the
// test failed, the tail of its log is printed first.
func startReplica(t *testing.T, name string, env map[string]string) *replica {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	// A free port can be taken by another process between the probe and
	// the replica's listen; a few attempts make that harmless.
	for attempt := range 3 {
		port, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{
			name:    name,
			url:     "http://127.0.0.1:" + strconv.Itoa(port),
			logPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, attempt)),
		}
		if lastErr = r.start(port, env); lastErr != nil {
			t.Fatalf("start replica %s: %v", name, lastErr)
		}
		t.Cleanup(func() {
			if err := r.stop(); err != nil {
				t.Errorf("stop replica %s: %v", name, err)
			}
			if t.Failed() {
				t.Logf("replica %s log (%s), last lines:\n%s", name, r.logPath, tail(r.logPath, logTail))
			}
		})
		if lastErr = r.waitReady(readyTimeout); lastErr == nil {
			return r
		}
		if !strings.Contains(tail(r.logPath, logTail), "address already in use") {
			break
		}
	}
	t.Fatalf("replica %s did not become ready: %v", name, lastErr)
	return nil
}

// baseEnv is what every replica gets unless a test overrides it.
func baseEnv() map[string]string {
	return map[string]string{
		"ADMIN_TOKEN":      adminToken,
		"LOG_LEVEL":        "info",
		"SHUTDOWN_TIMEOUT": shutdownTimeout,
	}
}

func (r *replica) start(port int, env map[string]string) error {
	logFile, err := os.Create(r.logPath)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(seckillBin, "serve")
	// An explicit environment: a REDIS_ADDRS or LOCK in the developer's
	// shell must not change what a scenario tests.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
	merged := baseEnv()
	for k, v := range env {
		merged[k] = v
	}
	merged["ADDR"] = "127.0.0.1:" + strconv.Itoa(port)
	for k, v := range merged {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C in the terminal reaches the test,
	// which stops the replica itself, by PID. A test binary killed before
	// its clean-up takes the replica with it (procutil's guard).
	p, err := procutil.Start(cmd)
	if err != nil {
		return err
	}
	r.cmd, r.exited = cmd, p.Done()
	return nil
}

// pid is the replica's process id.
func (r *replica) pid() int { return r.cmd.Process.Pid }

// running reports whether the process has not exited.
func (r *replica) running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// waitReady polls /readyz until it answers 200, the process exits, or the
// timeout passes.
func (r *replica) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return poll.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		if !r.running() {
			return false, fmt.Errorf("process %d exited; log:\n%s", r.pid(), tail(r.logPath, logTail))
		}
		status, _, err := get(ctx, r.url+"/readyz")
		return err == nil && status == 200, nil
	})
}

// pause freezes the replica's process where it is (SIGSTOP, by PID,
// never by name) until resume. Where processes cannot be paused
// (Windows) the error wraps errors.ErrUnsupported, and runSale skips the
// scenario with it.
func (r *replica) pause() error {
	if !r.running() {
		return fmt.Errorf("replica %s (pid %d) is not running", r.name, r.pid())
	}
	return procutil.Pause(r.cmd.Process)
}

// resume continues the replica's process after pause (SIGCONT).
func (r *replica) resume() error {
	if !r.running() {
		return fmt.Errorf("replica %s (pid %d) is not running", r.name, r.pid())
	}
	return procutil.Resume(r.cmd.Process)
}

// kill is kill -9: a crash, with no release and no shutdown. It returns
// once the process is gone.
func (r *replica) kill() error {
	if !r.running() {
		return nil
	}
	_ = procutil.Resume(r.cmd.Process) // a paused process is killed too, but say so
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("replica %s (pid %d) survived SIGKILL for %v", r.name, r.pid(), stopGrace)
	}
}

// stop ends the replica for clean-up: resume (a process paused by a
// scenario cannot act on anything else), SIGTERM (procutil.Terminate), and
// a kill if it has not exited after stopGrace.
func (r *replica) stop() error {
	if r.cmd == nil || !r.running() {
		return nil
	}
	_ = procutil.Resume(r.cmd.Process)
	if err := procutil.Terminate(r.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(stopGrace):
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	return fmt.Errorf("replica %s (pid %d) ignored SIGTERM for %v; killed", r.name, r.pid(), stopGrace)
}

// tail returns the last n lines of the file at path, or why it cannot,
// leaving out the access log of requests that got a 2xx, 3xx, 4xx or 503
// busy (in a sale, thousands of lines that say nothing about a failure;
// 500s stay) and go-redis's
// dial failures while a Redis is down (one every few milliseconds), which
// it counts instead.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var lines []string
	dialFailures := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		switch l := sc.Text(); {
		case routine(l):
		case strings.Contains(l, "connection pool: failed to dial"):
			dialFailures++
		default:
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if dialFailures > 0 {
		lines = append(lines, fmt.Sprintf("(and %d go-redis dial failures)", dialFailures))
	}
	return strings.Join(lines, "\n")
}

// routine reports whether a log line is the access log of a request that
// did not fail on the server's side: any status below 500, and 503 (busy,
// or not ready while Redis is down: expected in these scenarios).
func routine(line string) bool {
	if !strings.Contains(line, "msg=request ") {
		return false
	}
	_, status, ok := strings.Cut(line, " status=")
	return ok && (status < "5" || strings.HasPrefix(status, "503 "))
}
