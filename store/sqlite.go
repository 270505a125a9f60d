package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// ErrNoCgo is returned by Open when the binary was built without cgo and
// the database is a SQLite file: the SQLite driver is C code.
var ErrNoCgo = errors.New("store: this binary was built with CGO_ENABLED=0, but the SQLite driver needs cgo: install a C compiler (Debian/Ubuntu: apt-get install -y gcc) and build with CGO_ENABLED=1, or use a postgres:// DATABASE, which needs no cgo")

// writeGate is a SQLite store's writers in this process, one at a time.
// SQLite takes one writer at a time for the whole file, and a writer that
// finds the file locked sleeps in SQLite's busy handler, for 1, 2, 5, 10
// ms and longer, each time it finds it locked again: far longer than a
// write takes. Under a burst, sixteen pooled connections that write at
// once spend more time asleep than writing, and the sleeps make the slow
// answers. So this process's writers wait their turn here, in Go, and
// only another process's writer can make one sleep. A PostgreSQL store
// has no gate (nil): its writers lock rows, not the database.
type writeGate chan struct{}

// enter waits for the gate, or for ctx to end. The caller calls leave.
func (g writeGate) enter(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("store: wait to write: %w", ctx.Err())
	}
}

func (g writeGate) leave() {
	if g != nil {
		<-g
	}
}

// write runs fn, a write, once its turn comes at gate.
func (g writeGate) write(ctx context.Context, fn func() error) error {
	if err := g.enter(ctx); err != nil {
		return err
	}
	defer g.leave()
	return fn()
}

// transaction runs fn in one transaction of the store's database, its turn
// come at the gate.
func (s *Store) transaction(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.gate.write(ctx, func() error {
		return s.db.WithContext(ctx).Transaction(fn)
	})
}

// exec runs one writing statement, its turn come at the gate, and returns
// how many rows it changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.gate.write(ctx, func() error {
		res := s.db.WithContext(ctx).Exec(query, args...)
		n = res.RowsAffected
		return res.Error
	})
	return n, err
}

// busyTimeout is how long a statement waits for another connection's write
// lock before failing. Writes are short (one product row, one order), so
// waiting this long means something is wrong.
const busyTimeout = 5 * time.Second

// openSQLite opens (creating if needed) the SQLite file at path, which
// Check has accepted, and migrates it.
func openSQLite(path string) (*Store, error) {
	if !cgoEnabled {
		return nil, ErrNoCgo
	}
	// Per-connection options go in the DSN so that every pooled connection
	// gets them. The journal mode is not among them: it belongs to the file
	// (see enableWAL).
	dsn := path + "?_busy_timeout=" + fmt.Sprint(busyTimeout.Milliseconds()) + "&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{db: db, gate: make(writeGate, 1)}
	if path == ":memory:" {
		sqlDB.SetMaxOpenConns(1) // each connection would get its own database
	} else {
		// A flash sale sends far more requests than SQLite has use for
		// connections; queueing in the pool is cheaper than thousands of
		// open files. Readers still run in parallel (WAL).
		sqlDB.SetMaxOpenConns(16)
		sqlDB.SetMaxIdleConns(16)
	}
	if err := s.enableWAL(path); err != nil {
		_ = s.Close()
		return nil, err
	}
	// One (immediate) transaction: it holds the file's write lock from its
	// first statement, so processes migrate one after the other.
	if err := s.db.Transaction(migrateTx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", path, err)
	}
	stmts, err := prepareSQLite(sqlDB)
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.path = gormPath{db: db, sqlDB: sqlDB, stmts: stmts, gate: s.gate}
	return s, nil
}

// enableWAL switches the file to WAL mode, where readers do not block the
// writer; the mode is stored in the file, so one switch serves every
// connection and every process. The switch needs an exclusive lock, and
// SQLite returns SQLITE_BUSY for it at once instead of calling the busy
// handler, so replicas opening a new file together retry here, for up to
// the busy timeout.
func (s *Store) enableWAL(path string) error {
	deadline := time.Now().Add(busyTimeout)
	delay := time.Millisecond
	for {
		var mode string
		err := s.db.Raw("PRAGMA journal_mode = WAL").Scan(&mode).Error
		switch {
		case err == nil && path == ":memory:":
			return nil // an in-memory database has no WAL, nor needs one
		case err == nil && !strings.EqualFold(mode, "wal"):
			return fmt.Errorf("store: open %s: journal mode is %q, not WAL (is the file on a network file system?)", path, mode)
		case err == nil:
			return nil
		case !isBusy(err) || time.Now().After(deadline):
			return fmt.Errorf("store: open %s: set WAL mode: %w", path, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}
