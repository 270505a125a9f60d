package faulttest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/seckillbin"
)

// seckillBin is the service binary every test starts replicas from, built
// once by TestMain.
var seckillBin string

// TestMain builds the seckill binary once for the whole run: each scenario
// starts several replicas, and a build per test would cost more than the
// tests. The binary is built without -race even when the tests run with
// it (package seckillbin says why).
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
	bin, remove, err := seckillbin.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faulttest: FAIL:", err)
		return 1
	}
	defer remove()
	seckillBin = bin
	// The PostgreSQL scenarios share one server, started by the first of
	// them and stopped when the tests are done.
	return pgtest.Main(m)
}
