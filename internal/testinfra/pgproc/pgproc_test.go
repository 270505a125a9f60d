package pgproc_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// A server starts, serves a database of its own, and is gone after Stop:
// its process and its directory.
func TestStartCreateStop(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts PostgreSQL servers (initdb and postgres take seconds)")
	}
	ctx := context.Background()
	srv, err := pgproc.Start(ctx, pgproc.Options{})
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url, err := srv.CreateDatabase(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var db, fsync string
	if err := conn.QueryRow(ctx, "SELECT current_database(), current_setting('fsync')").Scan(&db, &fsync); err != nil {
		t.Fatal(err)
	}
	if db != "shop" || fsync != "off" {
		t.Errorf("got database %q fsync %q, want shop and off", db, fsync)
	}
	// Drop closes the connection still open to it.
	if err := srv.DropDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("the connection to the dropped database still answers")
	}
	pid := srv.PID()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if procutil.Exists(pid) {
		t.Errorf("postgres pid %d still exists after Stop", pid)
	}
	if srv.PID() != 0 {
		t.Errorf("PID after Stop: got %d, want 0", srv.PID())
	}
}

// helperEnv makes the test binary, run again, the helper process of
// TestServerDiesWithItsParent.
const helperEnv = "PGPROC_TEST_HELPER"

// The helper: start a server, print its PID, and wait to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		srv, err := pgproc.Start(context.Background(), pgproc.Options{})
		if errors.Is(err, errors.ErrUnsupported) {
			fmt.Println("unsupported:", err)
			os.Exit(0)
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("pid:", srv.PID(), "dir:", srv.Dir())
		select {}
	}
	os.Exit(m.Run())
}

// A test binary killed with SIGKILL cannot stop its server; procutil's
// guard does (on Linux the kernel's parent-death signal), so no server
// outlives the run. The helper is this test binary, run again.
func TestServerDiesWithItsParent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts PostgreSQL servers (initdb and postgres take seconds)")
	}
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=1")
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	if why, ok := strings.CutPrefix(line, "unsupported: "); ok {
		t.Skip(strings.TrimSpace(why))
	}
	var pid int
	var dir string
	if _, err := fmt.Sscanf(line, "pid: %d dir: %s", &pid, &dir); err != nil || !strings.Contains(dir, "pgproc-") {
		t.Fatalf("helper said %q, want its server's pid and directory", line)
	}
	// The killed helper cannot remove its server's directory.
	defer os.RemoveAll(dir)
	if !procutil.Exists(pid) {
		t.Fatalf("server pid %d does not exist before the kill, want it running", pid)
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := poll.Until(ctx, 10*time.Millisecond, func() (bool, error) { return !procutil.Exists(pid), nil }); err != nil {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
		t.Fatalf("server pid %d still runs 20s after its parent was killed", pid)
	}
}
