// Package pgproc starts and stops real PostgreSQL servers for tests and
// benchmarks: initdb in a temporary directory, then postgres on a free
// 127.0.0.1 port, stopped by PID. The store is tested against a real
// server, never a fake.
//
// initdb and postgres refuse to run as root. When the tests run as root,
// both run as the postgres user (created by the Debian package), which
// gets the temporary directory.
//
// Every child process gets SIGKILL from the kernel if the thread that
// started it exits (Pdeathsig), so that a test binary killed mid-run does
// not leave a server behind: the postmaster's own backends exit when it
// dies. Start locks the goroutine to its OS thread around the fork, since
// Pdeathsig follows the forking thread, not the process.
package pgproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-ref/seckill/internal/procutil"
)

// ErrNotInstalled is returned when no PostgreSQL server programs are found.
var ErrNotInstalled = errors.New("PostgreSQL not found: no initdb and postgres in $PG_BINDIR, `pg_config --bindir`, /usr/lib/postgresql/*/bin or on PATH: install it (Debian/Ubuntu: apt-get install -y postgresql; macOS: brew install postgresql), or run ./scripts/test.sh, which installs it when it can")

// Superuser is the role initdb creates, and the user of every URL.
const Superuser = "postgres"

// Options change how the server runs.
type Options struct {
	// Durable keeps PostgreSQL's defaults: the server flushes its files to
	// disk (fsync, full_page_writes, synchronous_commit). Without it the
	// server skips every flush, which makes tests faster and loses data
	// only in a crash of the machine, which tests do not survive anyway.
	Durable bool
	// Settings are more server settings (-c name=value), applied after
	// the others, so they may override them.
	Settings map[string]string
	// MaxConnections is the server's max_connections; 0 means 300, enough
	// for a few replicas with full pools at once.
	MaxConnections int
}

// Server is one PostgreSQL server child process and its data directory.
type Server struct {
	Port int
	dir  string // removed by Stop

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	out    *procutil.TailBuffer

	stopOnce sync.Once
	stopErr  error
}

// Start runs initdb and then postgres on a free 127.0.0.1 port, and returns
// once the server accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgproc-")
	if err != nil {
		return nil, fmt.Errorf("pgproc: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgproc: give %s to the %s user: %w", dir, Superuser, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := command(filepath.Join(bin, "initdb"), cred,
		"-D", data, "-U", Superuser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := run(initdb); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgproc: initdb: %w\n%s%s", err, out.String(), tmpHint(cred, dir))
	}
	var lastErr error
	// A free port can be taken by someone else between the probe and the
	// server's bind; a few attempts make that race harmless.
	for range 5 {
		port, err := procutil.FreePort()
		if err != nil {
			lastErr = err
			break
		}
		s := &Server{Port: port, dir: dir}
		if lastErr = s.start(ctx, bin, data, cred, opts); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil || !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) start(ctx context.Context, bin, data string, cred *syscall.Credential, opts Options) error {
	maxConns := opts.MaxConnections
	if maxConns == 0 {
		maxConns = 300
	}
	args := []string{"-D", data,
		"-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", // TCP only: no socket path to clash or to be too long
		"-c", "max_connections=" + strconv.Itoa(maxConns),
		"-c", "log_min_messages=warning",
	}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	names := slices.Sorted(maps.Keys(opts.Settings))
	for _, name := range names {
		args = append(args, "-c", name+"="+opts.Settings[name])
	}
	cmd := command(filepath.Join(bin, "postgres"), cred, args...)
	out := &procutil.TailBuffer{Max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := startLocked(cmd); err != nil {
		return fmt.Errorf("pgproc: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.out = cmd, exited, out
	if err := s.waitReady(ctx); err != nil {
		_ = s.end(syscall.SIGKILL)
		return fmt.Errorf("pgproc: postgres on port %d did not become ready: %w; output: %s", s.Port, err, out.String())
	}
	return nil
}

// readyTimeout bounds the wait for a new server: start-up is fast, but a
// loaded machine can make it slow.
const readyTimeout = 60 * time.Second

// waitReady polls a connection to the server until one succeeds, the
// process exits, or the deadline passes.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		err := s.ping(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-s.exited:
			t.Stop()
			return errors.New("process exited")
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func (s *Server) ping(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(cctx)
}

// URL is the connection URL of database on the server, as the superuser.
func (s *Server) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates an empty database and returns its URL. name must
// be a valid unquoted identifier: lower-case letters, digits and '_'.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := s.admin(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return "", fmt.Errorf("pgproc: create database %s: %w", name, err)
	}
	return s.URL(name), nil
}

// DropDatabase drops a database, closing any connection still open to it.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if err := s.admin(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgproc: drop database %s: %w", name, err)
	}
	return nil
}

func (s *Server) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// ident quotes name as an SQL identifier.
func ident(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// PID is the postmaster's process id, or 0 once it has exited.
func (s *Server) PID() int {
	select {
	case <-s.exited:
		return 0
	default:
		return s.cmd.Process.Pid
	}
}

// Stop ends the server with a fast shutdown (SIGINT: open transactions are
// rolled back and connections closed), SIGKILL if it has not exited
// within ten seconds, then removes its directory. It is safe to call more
// than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.end(syscall.SIGINT)
		if err := os.RemoveAll(s.dir); err != nil {
			s.stopErr = errors.Join(s.stopErr, err)
		}
	})
	return s.stopErr
}

const stopGrace = 10 * time.Second

func (s *Server) end(sig syscall.Signal) error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot act on the signal
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("pgproc: postgres pid %d ignored %v for %v; killed", s.cmd.Process.Pid, sig, stopGrace)
	}
}

// Dir is the server's directory: its data directory is in it. Stop
// removes it.
func (s *Server) Dir() string { return s.dir }

// Output is the tail of the server's log.
func (s *Server) Output() string { return s.out.String() }

// BinDir finds the directory of initdb and postgres: $PG_BINDIR, then
// `pg_config --bindir`, then the newest /usr/lib/postgresql/*/bin (where
// Debian puts them, off PATH), then the directory initdb on PATH resolves
// to.
func BinDir() (string, error) {
	var dirs []string
	if d := os.Getenv("PG_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { return version(b) - version(a) })
	dirs = append(dirs, versions...)
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

// version is the major version in /usr/lib/postgresql/<version>/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// credential is the postgres user's, when running as root; nil otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(Superuser)
	if err != nil {
		return nil, fmt.Errorf("pgproc: running as root, and initdb refuses root, but there is no %s user to run it as (%v): install the postgresql package, which creates one, or run the tests as another user", Superuser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgproc: the %s user's ids: %w", Superuser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tmpHint explains the usual cause of initdb failing as the postgres user.
func tmpHint(cred *syscall.Credential, dir string) string {
	if cred == nil {
		return ""
	}
	return fmt.Sprintf("(initdb ran as the %s user in %s: every directory above it must be searchable by that user; set TMPDIR to one that is, such as /tmp)", Superuser, dir)
}

// command is a child process in its own process group (a Ctrl-C in the
// terminal reaches the test, which stops the server by PID), run as cred
// when set, killed by the kernel if the starting thread exits.
func command(path string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// startLocked starts cmd from a goroutine locked to its OS thread: the
// kernel sends Pdeathsig when the thread that forked the child exits, so
// the fork must happen on a thread that is not about to. Unlocked, the
// thread goes back to the runtime, which ends threads only when a goroutine
// exits while locked to one, so it lasts as long as the process.
func startLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// run is cmd.Run with startLocked.
func run(cmd *exec.Cmd) error {
	if err := startLocked(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}
