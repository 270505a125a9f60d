// Package pgproc starts and stops real PostgreSQL servers for tests and
// benchmarks: initdb in a temporary directory, then postgres on a free
// 127.0.0.1 port, stopped by PID. The store is tested against a real
// server, never a fake.
//
// initdb and postgres refuse to run as root. When the tests run as root,
// both run as the postgres user (created by the Debian package), which
// gets the temporary directory.
//
// Every child process is started by internal/procutil, so that a test
// binary killed mid-run does not leave a server behind (procutil's guard
// kills the postmaster; its backends exit when it dies). Servers run on
// Linux and macOS; on Windows, where postgres is stopped through pg_ctl's
// events rather than signals, Start returns an error wrapping
// errors.ErrUnsupported.
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
	"slices"
	"strconv"
	"strings"
	"sync"
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
	exited <-chan struct{} // closed when cmd has been waited for
	out    *procutil.TailBuffer

	stopOnce sync.Once
	stopErr  error
}

// Start runs initdb and then postgres on a free 127.0.0.1 port, and returns
// once the server accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	as, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgproc-")
	if err != nil {
		return nil, fmt.Errorf("pgproc: %w", err)
	}
	if as != nil {
		if err := os.Chown(dir, as.uid, as.gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgproc: give %s to the %s user: %w", dir, Superuser, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := command(filepath.Join(bin, "initdb"), as,
		"-D", data, "-U", Superuser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := run(initdb); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgproc: initdb: %w\n%s%s", err, out.String(), tmpHint(as, dir))
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
		if lastErr = s.start(ctx, bin, data, as, opts); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil || !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) start(ctx context.Context, bin, data string, as *account, opts Options) error {
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
	cmd := command(filepath.Join(bin, "postgres"), as, args...)
	out := &procutil.TailBuffer{Max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	p, err := procutil.Start(cmd)
	if err != nil {
		return fmt.Errorf("pgproc: start postgres: %w", err)
	}
	s.cmd, s.exited, s.out = cmd, p.Done(), out
	if err := s.waitReady(ctx); err != nil {
		_ = s.end("SIGKILL", (*os.Process).Kill)
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
		s.stopErr = s.end("SIGINT", procutil.Interrupt)
		if err := os.RemoveAll(s.dir); err != nil {
			s.stopErr = errors.Join(s.stopErr, err)
		}
	})
	return s.stopErr
}

const stopGrace = 10 * time.Second

// end ends the server with how (named what, for the error), and kills it
// if it has not exited after stopGrace.
func (s *Server) end(what string, how func(*os.Process) error) error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = procutil.Resume(s.cmd.Process) // a paused process cannot act on the signal
	if err := how(s.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
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
		return fmt.Errorf("pgproc: postgres pid %d ignored %s for %v; killed", s.cmd.Process.Pid, what, stopGrace)
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

// account is the user initdb and postgres run as, when not this process's.
type account struct{ uid, gid int }

// serverUser is the postgres user's account, when running as root; nil
// otherwise.
func serverUser() (*account, error) {
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
	return &account{uid: int(uid), gid: int(gid)}, nil
}

// tmpHint explains the usual cause of initdb failing as the postgres user.
func tmpHint(as *account, dir string) string {
	if as == nil {
		return ""
	}
	return fmt.Sprintf("(initdb ran as the %s user in %s: every directory above it must be searchable by that user; set TMPDIR to one that is, such as /tmp)", Superuser, dir)
}

// command is initdb or postgres with a clean environment, run as as when
// set (runAs).
func command(path string, as *account, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "TZ=UTC"}
	runAs(cmd, as)
	return cmd
}

// run starts cmd with procutil (its own process group, guarded) and waits
// for it.
func run(cmd *exec.Cmd) error {
	p, err := procutil.Start(cmd)
	if err != nil {
		return err
	}
	return p.Wait()
}
