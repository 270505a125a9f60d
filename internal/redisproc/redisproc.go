// Package redisproc starts and stops real redis-server processes on loopback
// ports. Tests, the fault-injection suite and the demo use it so that the lock
// is always exercised against a real server, never a fake.
//
// Every server is started without persistence (--save "" --appendonly no),
// so a Restart loses every key: that is how the tests show that fencing
// tokens survive a server that forgets its counters. A snapshot written on
// request (SAVE) is the exception: Restart keeps the working directory, and
// the new server loads it, as a server restarted from an older snapshot
// would.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
)

// ErrNotInstalled is returned when redis-server is not on PATH.
var ErrNotInstalled = errors.New("redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis), or run ./scripts/test.sh, which installs it when it can")

// Server is one redis-server child process.
type Server struct {
	Port int
	args []string
	env  []string // added to this process's environment
	dir  string
	conf string // sentinel mode: the configuration file (sentinel.go)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{} // closed when cmd has been waited for
	out    *procutil.TailBuffer
}

// Start runs redis-server on a free 127.0.0.1 port and returns once it answers
// PING. extra is appended to the command line (for example "--replicaof",
// "127.0.0.1", "6379").
func Start(ctx context.Context, extra ...string) (*Server, error) {
	return StartEnv(ctx, nil, extra...)
}

// StartEnv is Start with env (KEY=value) added to the server's
// environment, here and at every Restart: a preloaded library that moves
// its clock (internal/fakeclock), for example.
func StartEnv(ctx context.Context, env []string, extra ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNotInstalled
	}
	var lastErr error
	// A free port can be taken by someone else between our probe and the
	// server's bind; a few attempts make that race harmless.
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, args: extra, env: env}
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// Addr is the host:port clients connect to.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// PID is the process id of the running server, or 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil || s.isExited() {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) start(ctx context.Context) error {
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "redisproc-")
		if err != nil {
			return err
		}
		s.dir = dir
	}
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"} // the file must come first
	}
	args = append(args,
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--loglevel", "warning",
	)
	args = append(args, s.args...)
	cmd := exec.Command("redis-server", args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	out := &procutil.TailBuffer{Max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a Ctrl-C in the terminal reaches us, and we stop the
	// server ourselves, by PID. If we are killed instead, the server dies
	// with us (procutil's guard).
	p, err := procutil.Start(cmd)
	if err != nil {
		return fmt.Errorf("redisproc: start redis-server: %w", err)
	}
	exited := p.Done()

	s.mu.Lock()
	s.cmd, s.exited, s.out = cmd, exited, out
	s.mu.Unlock()

	if err := waitReady(ctx, s.Addr(), exited); err != nil {
		_ = s.Kill()
		return fmt.Errorf("redisproc: redis-server on port %d did not become ready: %w; output: %s", s.Port, err, out.String())
	}
	return nil
}

// waitReady polls PING until the server answers, the process exits, or ten
// seconds pass.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	delay := time.Millisecond
	for {
		if err := Ping(ctx, addr); err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-exited:
			t.Stop()
			return errors.New("process exited")
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// Ping sends one PING over a fresh connection and expects +PONG, or -NOAUTH
// from a server with a password. It needs no client library, so it also
// works against a server that is still loading.
func Ping(ctx context.Context, addr string) error {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// A server with a password (requirepass) answers -NOAUTH: it is up too.
	if r := strings.TrimSpace(line); r != "+PONG" && !strings.HasPrefix(r, "-NOAUTH") {
		return fmt.Errorf("unexpected reply %q", r)
	}
	return nil
}

// Stop ends the server with SIGTERM (procutil.Terminate) and waits for it
// to exit (killed after five seconds). Stopping a stopped server is a
// no-op.
func (s *Server) Stop() error { return s.end("SIGTERM", procutil.Terminate, 5*time.Second) }

// Kill ends the server with SIGKILL, like a crash, and waits for it to exit.
func (s *Server) Kill() error { return s.end("SIGKILL", (*os.Process).Kill, 5*time.Second) }

// end ends the server with how (named what, for the error) and waits for
// it to exit, killing it after grace.
func (s *Server) end(what string, how func(*os.Process) error, grace time.Duration) error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	// A paused process must be resumed to act on SIGTERM; where pausing
	// is not supported, nothing was paused.
	_ = procutil.Resume(cmd.Process)
	if err := how(cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("redisproc: redis-server pid %d ignored %s for %v; killed", cmd.Process.Pid, what, grace)
	}
}

// Restart stops the server and starts a new one on the same port with the
// same arguments and working directory. Without persistence the new server
// starts empty, or with the last snapshot written by SAVE.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start(ctx)
}

// Pause stops the running server where it is (SIGSTOP): its connections
// stay open and it answers nothing until Resume. Where processes cannot be
// paused (Windows) the error wraps errors.ErrUnsupported.
func (s *Server) Pause() error { return s.signal(procutil.Pause) }

// Resume continues a server stopped by Pause (SIGCONT).
func (s *Server) Resume() error { return s.signal(procutil.Resume) }

func (s *Server) signal(f func(*os.Process) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redisproc: not running")
	}
	return f(s.cmd.Process)
}

// Close stops the server and removes its working directory.
func (s *Server) Close() error {
	err := s.Stop()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
	return err
}

func (s *Server) isExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// FreePort asks the kernel for a free 127.0.0.1 TCP port.
func FreePort() (int, error) { return procutil.FreePort() }
