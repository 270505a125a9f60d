package faulttest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// seckillBin is the service binary every test starts replicas from, built
// once by TestMain.
var seckillBin string

// TestMain builds the seckill binary once for the whole run: each scenario
// starts several replicas, and a build per test would cost more than the
// tests. The binary is built without -race even when the tests run with
// it: the race detector slows the service several times over, and the
// suite is about what the processes do to each other, which real signals
// show in a normal build; the service's own races are the business of its
// package tests.
//
// A missing redis-server or PostgreSQL, or a failed build, is a failure
// with a message, never a skip: a suite that quietly does not run proves
// nothing.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse() // for testing.Short
	if testing.Short() {
		fmt.Println("faulttest: skipped with -short: every scenario runs real processes (replicas, Redis, PostgreSQL)")
		return 0
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "faulttest: FAIL:", redisproc.ErrNotInstalled)
		return 1
	}
	if _, err := pgproc.BinDir(); err != nil {
		fmt.Fprintln(os.Stderr, "faulttest: FAIL:", err)
		return 1
	}
	if bin := os.Getenv(seckillBinEnv); bin != "" {
		// A child test process of the orphan test: its parent built it.
		seckillBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "faulttest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faulttest: FAIL: create a directory for the seckill binary:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	seckillBin = filepath.Join(dir, "seckill")
	if err := build(seckillBin); err != nil {
		fmt.Fprintln(os.Stderr, "faulttest: FAIL:", err)
		return 1
	}
	// The PostgreSQL scenarios share one server, started by the first of
	// them and stopped when the tests are done.
	return pgtest.Main(m)
}

// build compiles the module's main package to bin. go test puts its own Go
// first on PATH, so this is the toolchain running the tests.
func build(bin string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is not on PATH, so the seckill binary cannot be built: %w", err)
	}
	// No VCS stamp: it is useless here, and fails the build where git
	// cannot read the checkout.
	cmd := exec.Command(goTool, "build", "-buildvcs=false", "-o", bin, "github.com/seckill-ref/seckill")
	// A -race in GOFLAGS would slow every replica down; the flag belongs
	// to the test binary only.
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" && f != "--race" && !strings.HasPrefix(f, "-race=") {
			flags = append(flags, f)
		}
	}
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := procutil.Start(cmd) // a killed test run takes the build with it
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		return fmt.Errorf("go build the seckill binary: %w\n%s", err, out.Bytes())
	}
	return nil
}
