package store

import (
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
	s := &Store{db: db}
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
	s.path = gormPath{db: db, sqlDB: sqlDB, stmts: stmts}
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
