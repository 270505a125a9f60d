// Package fakeclock steps the wall clock of a child process while it runs,
// as an NTP step or an operator's `date -s` would, on that process alone:
// a redis-server whose clock jumps forward expires its keys early.
//
// New compiles a small library (csrc/fakeclock.c, with the C compiler that
// the SQLite driver needs anyway) that the child preloads (Env). It adds
// an offset to CLOCK_REALTIME, gettimeofday and time, read from a file that
// this process maps and changes (Jump); the monotonic clocks are not moved.
//
// Why not libfaketime (Debian's faketime package), which does the same in
// general: its 0.9.10 cannot start redis-server 7.0 at all. redis-server
// is linked with jemalloc, whose start-up reads the clock while
// libfaketime is still looking up the real functions with dlsym, which
// allocates: libfaketime detects the recursion, fails clock_gettime, and
// jemalloc does not expect that. This library calls the kernel directly
// and allocates nothing.
//
// References: libfaketime's issue 130, "libfaketime clashes with
// jemalloc" (github.com/wolfcw/libfaketime/issues/130), open since 0.9.7.
//
// Linux only: the library is loaded with LD_PRELOAD and calls Linux's
// clock system calls by number. Elsewhere New returns an error wrapping
// errors.ErrUnsupported, which the tests and the demo's matrix report as
// a skip.
package fakeclock

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"
)

//go:embed csrc/fakeclock.c
var source []byte

// ErrNoCompiler is New's error on a machine without a C compiler, which
// it needs to build the library.
var ErrNoCompiler = errors.New("fakeclock: no C compiler (cc or gcc) on PATH; install gcc (Debian/Ubuntu: apt-get install -y gcc)")

// Clock is the offset of one or more child processes' wall clocks.
type Clock struct {
	dir    string
	lib    string
	file   string
	mem    []byte // the offset file, mapped
	offset *int64 // into mem
}

// New builds the library in a temporary directory and returns a Clock at
// offset 0. Close removes the directory.
func New() (*Clock, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	cc, err := compiler()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fakeclock-")
	if err != nil {
		return nil, err
	}
	c := &Clock{dir: dir, lib: filepath.Join(dir, "fakeclock.so"), file: filepath.Join(dir, "offset")}
	if err := c.build(cc); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.mapOffset(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// compiler is $CC, or cc, or gcc.
func compiler() (string, error) {
	for _, name := range []string{os.Getenv("CC"), "cc", "gcc"} {
		if name == "" {
			continue
		}
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", ErrNoCompiler
}

func (c *Clock) build(cc string) error {
	src := filepath.Join(c.dir, "fakeclock.c")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", c.lib, src)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fakeclock: compile the preload library: %w\n%s", err, out.Bytes())
	}
	return nil
}

func (c *Clock) mapOffset() error {
	f, err := os.OpenFile(c.file, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(8); err != nil {
		return err
	}
	mem, err := mapShared(f, 8)
	if err != nil {
		return fmt.Errorf("fakeclock: map the offset file: %w", err)
	}
	c.mem = mem
	c.offset = (*int64)(unsafe.Pointer(&mem[0])) // page-aligned, so 8-byte aligned
	return nil
}

// Env is what a child process's environment needs for its clock to follow
// this one.
func (c *Clock) Env() []string {
	return []string{"LD_PRELOAD=" + c.lib, "FAKECLOCK_FILE=" + c.file}
}

// Jump moves the clock by d (forward if positive) at once, for every
// process that runs with Env.
func (c *Clock) Jump(d time.Duration) { atomic.AddInt64(c.offset, int64(d)) }

// Offset is how far the clock is from the real one.
func (c *Clock) Offset() time.Duration { return time.Duration(atomic.LoadInt64(c.offset)) }

// Close unmaps the offset and removes the library. Processes still
// running with it keep their last offset.
func (c *Clock) Close() error {
	err := unmap(c.mem)
	c.mem, c.offset = nil, nil
	return errors.Join(err, os.RemoveAll(c.dir))
}
