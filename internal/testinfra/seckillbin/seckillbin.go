// Package seckillbin builds the seckill binary for tests that start
// replicas as processes of their own (internal/faulttest, internal/demo).
//
// The binary is built without the race detector even when the tests run
// with it: the race detector slows the service several times over, and a
// test that starts replicas is about what the processes do to each other
// and what their buyers see, which a normal build shows; the service's own
// races are the business of its package tests (internal/app,
// internal/seckill, store, handlers, lock), which run it in their own
// process under -race.
package seckillbin

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/seckill-ref/seckill/internal/procutil"
)

// Build compiles the module's main package into a new temporary directory
// and returns the binary's path (seckill, or seckill.exe on Windows), and
// remove, which deletes the directory. go test puts its own Go first on
// PATH, so this is the toolchain running the tests.
func Build() (bin string, remove func(), err error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", nil, fmt.Errorf("the go command is not on PATH, so the seckill binary cannot be built: %w", err)
	}
	dir, err := os.MkdirTemp("", "seckill-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("create a directory for the seckill binary: %w", err)
	}
	remove = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "seckill")
	if filepath.Separator == '\\' {
		bin += ".exe"
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
		remove()
		return "", nil, fmt.Errorf("go build the seckill binary: %w\n%s", err, out.Bytes())
	}
	return bin, remove, nil
}
