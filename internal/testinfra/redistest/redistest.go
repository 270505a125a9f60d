// Package redistest gives tests real redis-server processes: each test starts
// its own on a free loopback port, and the server is stopped by PID when the
// test ends. There is no fallback to a fake: when redis-server is missing the
// test fails and says how to install it.
package redistest

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/redisproc"
)

// Server is a redis-server owned by one test.
type Server struct {
	*redisproc.Server
	t testing.TB
}

// Start runs a redis-server for the duration of t. extra is appended to its
// command line.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartEnv(t, nil, extra...)
}

// StartEnv is Start with env (KEY=value) added to the server's environment
// (redisproc.StartEnv).
func StartEnv(t testing.TB, env []string, extra ...string) *Server {
	t.Helper()
	s, err := redisproc.StartEnv(context.Background(), env, extra...)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop redis-server: %v", err)
		}
	})
	return &Server{Server: s, t: t}
}

// Client returns a new client for the server, closed when the test ends.
// Each call gives a separate connection pool, as a separate process would
// have.
func (s *Server) Client() *redis.Client {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Freeze pauses the server (SIGSTOP: its connections stay open, it
// answers nothing) until Resume or the end of the test. Where processes
// cannot be paused (Windows) it skips the test with one line: a test that
// freezes a server cannot show anything without it.
func (s *Server) Freeze() {
	s.t.Helper()
	err := s.Pause()
	if errors.Is(err, errors.ErrUnsupported) {
		s.t.Skipf("needs a frozen redis-server: %v", err)
	}
	if err != nil {
		s.t.Fatalf("pause redis-server: %v", err)
	}
	s.t.Cleanup(func() { _ = s.Resume() })
}

// Restart restarts the server on the same port, losing every key (except
// those of a snapshot written by SAVE, which the new server loads).
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Server.Restart(context.Background()); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}
