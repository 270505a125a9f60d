// Package pgtest gives tests real PostgreSQL databases (internal/testinfra/pgproc):
// one server per test binary, started by the first test that asks for a
// database, and one database per test, dropped when the test ends. A
// database is created in a fraction of a second, a server in seconds,
// hence the split. There is no fallback to a fake, and no skip: when
// PostgreSQL is missing the test fails and says how to install it. Only
// under -short is a test that needs the server skipped, since starting it
// (initdb, then postgres) costs seconds, and on Windows, where pgproc
// starts no server; the SQLite runs of the same tests still run.
//
// A package whose tests use Database calls Main from its TestMain, which
// stops the server when the tests are done:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
)

// shared is the test binary's server.
var shared struct {
	mu   sync.Mutex
	main bool // Main is running the tests
	srv  *pgproc.Server
	err  error // the failed start, reported to every later test
}

// Main runs m's tests and then stops the shared server if one was started.
// It returns the exit code for os.Exit.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop the PostgreSQL server:", err)
			code = max(code, 1)
		}
	}
	return code
}

// Server returns the test binary's server, starting it on first use.
func Server(t testing.TB) *pgproc.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs a PostgreSQL server (initdb and postgres take seconds)")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatal("pgtest: the shared PostgreSQL server needs pgtest.Main in the package's TestMain, which stops it")
	}
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = pgproc.Start(context.Background(), pgproc.Options{})
	}
	if errors.Is(shared.err, errors.ErrUnsupported) {
		t.Skip(shared.err)
	}
	if shared.err != nil {
		t.Fatalf("start PostgreSQL: %v", shared.err)
	}
	return shared.srv
}

// Database creates an empty database on the shared server for t and
// returns its URL. It is dropped when t ends.
func Database(t testing.TB) string {
	t.Helper()
	return NewDatabase(t, Server(t))
}

// EachDB runs test twice, as subtests, each on a new and empty database:
// "sqlite", a SQLite file in t's temporary directory, and "postgres", a
// database on the shared server (skipped under -short). It is for the tests
// whose outcome depends on what the database does.
func EachDB(t *testing.T, test func(t *testing.T, db string)) {
	t.Run("sqlite", func(t *testing.T) { test(t, filepath.Join(t.TempDir(), "seckill.db")) })
	t.Run("postgres", func(t *testing.T) { test(t, Database(t)) })
}

// Start runs a server of t's own with opts, stopped when t ends: for a
// benchmark that needs other settings than the shared server's.
func Start(t testing.TB, opts pgproc.Options) *pgproc.Server {
	t.Helper()
	srv, err := pgproc.Start(context.Background(), opts)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	return srv
}

// databases numbers the databases of this process, so that names are
// unique however tests are named.
var databases atomic.Int64

// NewDatabase creates an empty database on srv for t and returns its URL.
// It is dropped when t ends, with any connection still open to it.
func NewDatabase(t testing.TB, srv *pgproc.Server) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", databases.Add(1), identPart(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, err := srv.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.DropDatabase(ctx, name); err != nil {
			t.Errorf("%v", err)
		}
	})
	return url
}

// identPart is the test's name as lower-case letters, digits and '_',
// short enough for an identifier (63 bytes) with the prefix.
func identPart(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 48 {
			break
		}
	}
	return b.String()
}
