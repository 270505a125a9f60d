package faulttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// The orphan test runs a scenario in a child test process (this test
// binary again, running only TestOrphanScenarioChild), kills that process
// with SIGKILL in the middle of the scenario, as go test's -timeout or a CI
// runner would, and looks for the processes it had started.
const (
	// orphanChildEnv is the file the child writes its children's PIDs to;
	// set, it makes TestOrphanScenarioChild run.
	orphanChildEnv = "FAULTTEST_ORPHAN_CHILD"
	// orphanGuardEnv is the guard the child starts its processes with
	// (procutil.Guard's String: "lifeline", or "none" for the negative
	// control); unset, the default.
	orphanGuardEnv = "FAULTTEST_ORPHAN_GUARD"
	// seckillBinEnv hands the parent's seckill binary to the child, whose
	// TestMain then builds nothing.
	seckillBinEnv = "FAULTTEST_SECKILL_BIN"
)

// TestKilledTestLeavesNoChildren: after the test process is killed, its
// redis-server and its replica are gone (procutil's default guard).
func TestKilledTestLeavesNoChildren(t *testing.T) {
	t.Parallel()
	orphans(t, procutil.DefaultGuard)
}

// TestKilledTestLifelineLeavesNoChildren: the same with the lifeline as
// the only guard (on Linux, no parent-death signal): each child's watcher
// kills it once the test process is gone, and then exits. This is the
// mechanism macOS relies on, checked wherever the suite runs.
func TestKilledTestLifelineLeavesNoChildren(t *testing.T) {
	t.Parallel()
	orphans(t, procutil.LifelineGuard)
}

// TestKilledTestControlNoGuardLeavesChildren: the same with no guard; both
// children outlive the killed test process, which shows that the checks
// above would see them. The test then kills them itself, by PID.
func TestKilledTestControlNoGuardLeavesChildren(t *testing.T) {
	t.Parallel()
	orphans(t, procutil.NoGuard)
}

// grandchild is one process the child test started, identified by PID and
// start time, so that a recycled PID is never mistaken for it.
type grandchild struct {
	name  string // "redis", "replica", or "lifeline of" one of them
	pid   int
	start string // its start time, as procStat reads it
	addr  string // where it serves, to show a survivor still answers
}

func orphans(t *testing.T, g procutil.Guard) {
	if err := canInspect(); err != nil {
		t.Skip(err)
	}
	if !procutil.KillsWithParent() {
		t.Skip("procutil: no guard on this system: children are stopped by the normal clean-up only")
	}
	control := g == procutil.NoGuard
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "children")
	logPath := filepath.Join(dir, "child.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanScenarioChild$", "-test.count=1", "-test.v", "-test.timeout=5m")
	// TMPDIR: the child's temporary files (its SQLite file, redis-server's
	// directory, the replica's log) are in dir, which this test removes.
	cmd.Env = append(os.Environ(), orphanChildEnv+"="+pidFile, seckillBinEnv+"="+seckillBin, "TMPDIR="+dir)
	if g != procutil.DefaultGuard {
		cmd.Env = append(cmd.Env, orphanGuardEnv+"="+g.String())
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	child, err := procutil.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Cmd.Process.Kill()
		_ = child.Wait()
		if t.Failed() {
			t.Logf("child test process log:\n%s", tail(logPath, logTail))
		}
	})

	// Wait until the child is in the middle of its scenario: both its
	// processes started and purchases going through.
	ctx, cancel := context.WithTimeout(t.Context(), 2*readyTimeout)
	defer cancel()
	var kids []grandchild
	err = poll.Until(ctx, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-child.Done():
			return false, fmt.Errorf("the child test process exited early (%v)", child.Cmd.ProcessState)
		default:
		}
		kids, err = readChildren(pidFile)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for the child's scenario: %v", err)
	}
	if g == procutil.LifelineGuard {
		// Each child has its watcher, which must be gone too once it has
		// done its work.
		for _, k := range kids {
			pid, err := procutil.LifelineOf(k.pid)
			if err != nil {
				t.Fatalf("looking for the lifeline of %s: %v", k.name, err)
			}
			w := grandchild{name: "lifeline of " + k.name, pid: pid}
			st, ok := procStat(w.pid)
			if w.pid == 0 || !ok {
				t.Fatalf("%s (pid %d) has no lifeline watcher running", k.name, k.pid)
			}
			w.start = st.start
			kids = append(kids, w)
		}
	}
	for _, k := range kids {
		// Whatever happens below, nothing this test caused outlives it.
		t.Cleanup(func() {
			if err := killGrandchild(k); err != nil {
				t.Error(err)
			}
		})
		if !alive(k) {
			t.Fatalf("%s (pid %d) is not running before the kill", k.name, k.pid)
		}
	}
	t.Logf("child test process pid %d started %s", child.Pid(), describe(kids))

	if err := child.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	if !control {
		// The kernel signals the children while the killed process exits
		// (the watchers, as soon as it has); allow a loaded machine its
		// time.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		err := poll.Until(ctx, 10*time.Millisecond, func() (bool, error) {
			return len(living(kids)) == 0, nil
		})
		if err != nil {
			t.Fatalf("after SIGKILL of the test process, still running: %s", describe(living(kids)))
		}
		return
	}
	// Control: without a guard nothing ends the children. Look for two
	// seconds (a guard's SIGKILL takes milliseconds, so it would have
	// shown), and check that they still serve.
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err = poll.Until(ctx, 10*time.Millisecond, func() (bool, error) {
		if dead := len(kids) - len(living(kids)); dead > 0 {
			return false, fmt.Errorf("%d of %s died with their parent, though they had no guard", dead, describe(kids))
		}
		return false, nil
	})
	if !errors.Is(err, poll.ErrTimeout) {
		t.Fatal(err)
	}
	for _, k := range kids {
		if err := serves(t.Context(), k); err != nil {
			t.Errorf("%s (pid %d) outlived its parent but does not answer: %v", k.name, k.pid, err)
		}
	}
	t.Logf("as expected without a guard, still running after the kill: %s", describe(kids))
}

// TestOrphanScenarioChild is the child of the orphan tests: it starts a
// redis-server and a replica, writes their PIDs to the file its parent
// named, and buys until it is killed. It does nothing in a normal run.
func TestOrphanScenarioChild(t *testing.T) {
	t.Parallel()
	pidFile := os.Getenv(orphanChildEnv)
	if pidFile == "" {
		t.Skip("the child process of TestKilledTest*; runs only when started by it")
	}
	switch g := os.Getenv(orphanGuardEnv); g {
	case "":
	case procutil.LifelineGuard.String():
		procutil.SetGuard(procutil.LifelineGuard)
	case procutil.NoGuard.String():
		procutil.SetGuard(procutil.NoGuard)
	default:
		t.Fatalf("%s=%q: not a guard", orphanGuardEnv, g)
	}
	c := newCluster(t, 1, sqlite)
	r := c.replica("orphan", nil)
	id := createProduct(t, r, 1_000_000)
	var b strings.Builder
	fmt.Fprintf(&b, "redis %d %s\n", c.redis[0].PID(), c.redis[0].Addr())
	fmt.Fprintf(&b, "replica %d %s\n", r.pid(), r.url)
	// The file appears whole or not at all.
	tmp := pidFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// Bounded like every load loop; the parent kills this process long
	// before either bound.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	api := r.api()
	for i := range 6000 {
		if _, err := api.Purchase(ctx, id, fmt.Sprintf("u%d", i)); err != nil {
			t.Fatalf("purchase %d: got %v, want an order", i, err)
		}
		if i == 0 {
			if err := os.Rename(tmp, pidFile); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("not killed within 2 minutes")
		case <-tick.C:
		}
	}
	t.Fatal("not killed after 6000 purchases")
}

// readChildren parses the child's PID file and records each process's
// start time.
func readChildren(path string) ([]grandchild, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var kids []grandchild
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var k grandchild
		if _, err := fmt.Sscan(sc.Text(), &k.name, &k.pid, &k.addr); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		st, ok := procStat(k.pid)
		if !ok {
			return nil, fmt.Errorf("%s (pid %d) is not running", k.name, k.pid)
		}
		k.start = st.start
		kids = append(kids, k)
	}
	if len(kids) != 2 {
		return nil, fmt.Errorf("%s: got %d processes, want 2", path, len(kids))
	}
	return kids, sc.Err()
}

// alive reports whether k is still running: its PID exists, started at the
// same time (not a recycled PID), and is not a zombie (dead, waiting for
// whoever adopted it to reap it).
func alive(k grandchild) bool {
	st, ok := procStat(k.pid)
	return ok && st.start == k.start && st.state != "Z"
}

// living returns the processes of kids that are alive.
func living(kids []grandchild) []grandchild {
	var out []grandchild
	for _, k := range kids {
		if alive(k) {
			out = append(out, k)
		}
	}
	return out
}

// serves checks that a surviving child still does its job.
func serves(ctx context.Context, k grandchild) error {
	if k.name == "redis" {
		return redisproc.Ping(ctx, k.addr)
	}
	status, _, err := get(ctx, k.addr+"/healthz")
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("healthz: HTTP %d", status)
	}
	return err
}

// killGrandchild ends k, if it is still running, with SIGKILL by PID, and
// waits until it is gone. It is no longer our child, so it cannot be waited
// for: procStat watches it instead.
func killGrandchild(k grandchild) error {
	if !alive(k) {
		return nil
	}
	p, err := os.FindProcess(k.pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", k.name, k.pid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	if err := poll.Until(ctx, 10*time.Millisecond, func() (bool, error) { return !alive(k), nil }); err != nil {
		return fmt.Errorf("%s (pid %d) survived SIGKILL: %w", k.name, k.pid, err)
	}
	return nil
}

// describe lists processes for a message.
func describe(kids []grandchild) string {
	parts := make([]string, len(kids))
	for i, k := range kids {
		parts[i] = fmt.Sprintf("%s (pid %d)", k.name, k.pid)
	}
	return strings.Join(parts, ", ")
}
