package demo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/demo"
	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/testinfra/seckillbin"
)

// serveEnv, set in a child of this test binary, makes it a replica: the
// heap benchmark's (heapReplica), which needs this binary's heap report;
// the tests' replicas run the seckill binary (replica).
const serveEnv = demo.ServeEnv

// TestMain runs a replica when started as one, and otherwise the tests,
// checking that none leaves a goroutine behind (the replicas' servers, the
// Redis clients, the embedded Redis and its clock must all have stopped
// when the demo returns), nor a temporary directory (tempDirRun). A
// replica started with demo.HeapDirEnv reports its heap on SIGUSR1
// (BenchmarkQuietProducts reads it).
func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) != "" {
		if dir := os.Getenv(demo.HeapDirEnv); dir != "" {
			demo.ReportHeapOnSignal(dir)
		}
		if err := app.Main(context.Background(), nil, os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(tempDirRun{m})
}

// tempDirRun builds the replicas' binary (replicaBin) and runs the tests
// with TMPDIR a directory of their own, and
// fails the run if a directory is left in it afterwards: each demo sale
// (a matrix row too) makes its temporary directory there and must remove
// it, whatever happened; a test's t.TempDir is gone once the test is. The
// tests run in parallel, so this is checked once, after them all, rather
// than per test. Two things may be left, and go with the directory:
// porcupine's visualizations of the broken modes' violations, files a demo
// writes there for its user, and the directory Chromium (the matrix
// report's check) leaves there whatever the page. The directory is
// searchable by all, as /tmp is: PostgreSQL's initdb runs as the postgres
// user when the tests run as root (pgproc), and needs to reach its own
// directory below it.
type tempDirRun struct{ m *testing.M }

func (r tempDirRun) Run() int {
	bin, remove, err := seckillbin.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAIL:", err)
		return 1
	}
	defer remove()
	replicaBin = bin
	dir, err := os.MkdirTemp("", "demo-test-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.Setenv("TMPDIR", dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: a temporary directory for the tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	code := r.m.Run()
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAIL:", err)
		return 1
	}
	var left []string
	for _, e := range entries {
		visualization := !e.IsDir() && strings.HasSuffix(e.Name(), "linearizability.html")
		if !visualization && !strings.HasPrefix(e.Name(), "org.chromium.") {
			left = append(left, e.Name())
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "demo: FAIL: left behind in the tests' temporary directory %s: %v\n", dir, left)
		return 1
	}
	return code
}

// replicaBin is the seckill binary the demos' replicas run, built once by
// tempDirRun without the race detector (package seckillbin says why): most
// of the tests' time is their sales, and a replica under -race serves them
// several times slower.
var replicaBin string

// replica runs the seckill binary's serve, as the seckill binary's demo
// does.
func replica() (*exec.Cmd, error) {
	return exec.Command(replicaBin, "serve"), nil
}

// syncBuffer is a bytes.Buffer that goroutines may write while the test
// reads it. onWrite, when set, sees everything written so far.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	onWrite func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.onWrite != nil {
		b.onWrite(b.buf.String())
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// run is one demo: its exit status and what it printed.
type run struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runDemo runs the demo as main.go would, with env as the environment.
func runDemo(t *testing.T, ctx context.Context, stdout *syncBuffer, env map[string]string, args ...string) run {
	t.Helper()
	if stdout == nil {
		stdout = &syncBuffer{}
	}
	var stderr syncBuffer
	start := time.Now()
	code := demo.Command(replica)(ctx, args, func(k string) string { return env[k] }, stdout, &stderr)
	r := run{code: code, stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	t.Logf("demo %s: exit %d after %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

var (
	pidRE  = regexp.MustCompile(`demo: Redis: redis-server on \S+ \(pid (\d+)\)`)
	addrRE = regexp.MustCompile(`demo: Redis: embedded Redis \(miniredis\) on (\S+)`)
	dirRE  = regexp.MustCompile(`sharing (\S+)/seckill\.db`)
)

// assertCleanedUp checks, from what the demo printed, that the temporary
// directory of each of its sales is gone, and its Redis and replica
// processes too.
func assertCleanedUp(t *testing.T, r run) {
	t.Helper()
	dirs := dirRE.FindAllStringSubmatch(r.stdout, -1)
	if dirs == nil {
		t.Fatal("the demo did not print its database path")
	}
	for _, m := range dirs {
		if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temporary directory %s: got stat error %v, want it removed", m[1], err)
		}
	}
	assertRedisGone(t, r)
	assertReplicaProcessesGone(t, r)
}

var pidsRE = regexp.MustCompile(`demo: the replicas run as processes of their own \(pids ([\d, ]+)\)`)

// assertReplicaProcessesGone checks that the replica processes the demo
// printed, in every sale, no longer exist.
func assertReplicaProcessesGone(t *testing.T, r run) {
	t.Helper()
	for _, m := range pidsRE.FindAllStringSubmatch(r.stdout, -1) {
		for _, s := range strings.Split(m[1], ", ") {
			assertGone(t, "replica", s)
		}
	}
}

// assertRedisGone checks that the Redis the demo printed has stopped: the
// redis-server process no longer exists, or the embedded server no longer
// accepts connections.
func assertRedisGone(t *testing.T, r run) {
	t.Helper()
	if m := pidRE.FindStringSubmatch(r.stdout); m != nil {
		assertGone(t, "redis-server", m[1])
	}
	if m := addrRE.FindStringSubmatch(r.stdout); m != nil {
		if conn, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			_ = conn.Close()
			t.Errorf("the embedded Redis on %s still accepts connections", m[1])
		}
	}
}

// short is a short sale: a burst of 20 buyers per item, enough for the
// races of the unsafe modes to happen with nothing injected, over in
// about a second.
var short = []string{"-buyers", "1000", "-stock", "50"}

func args(extra ...string) []string { return append(append([]string{}, short...), extra...) }

// small is a sale for what needs no more: a control whose race a chaos
// pause makes certain (two buyers in flight at once are enough, and 200
// are), or a sale that only has to run. Under no lock a purchase is two
// writes to SQLite and the pause; a burst of 1000 of them takes seconds.
var small = []string{"-buyers", "200", "-stock", "50"}

func smallArgs(extra ...string) []string { return append(append([]string{}, small...), extra...) }

// assertGone checks that the process what with id pid no longer exists
// (procutil.Exists: kill -0 on Unix); the demo reaps its children, so a
// stopped one leaves no zombie behind that would still count.
func assertGone(t *testing.T, what, pid string) {
	t.Helper()
	id, _ := strconv.Atoi(pid)
	if procutil.Exists(id) {
		t.Errorf("%s pid %d still exists, want it gone", what, id)
	}
}
