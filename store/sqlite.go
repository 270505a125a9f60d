// Package store keeps products and orders in SQLite through GORM. It is the
// only package with SQL in it, and it implements seckill.Store.
//
// Several server processes on one host may share one database file: the
// file is opened in WAL mode (readers do not block the writer) with a busy
// timeout (a writer waits for another instead of failing), and every
// transaction starts with BEGIN IMMEDIATE, so that it takes the write lock
// up front rather than failing when a read upgrades to a write.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill-ref/seckill/internal/seckill"
)

var _ seckill.Store = (*Store)(nil)

// ErrNoCgo is returned by Open when the binary was built without cgo: the
// SQLite driver is C code.
var ErrNoCgo = errors.New("store: this binary was built with CGO_ENABLED=0, but the SQLite driver needs cgo: install a C compiler (Debian/Ubuntu: apt-get install -y gcc) and build with CGO_ENABLED=1")

// busyTimeout is how long a statement waits for another connection's write
// lock before failing. Writes are short (one product row, one order), so
// waiting this long means something is wrong.
const busyTimeout = 5 * time.Second

// Store is a SQLite database of products and orders.
type Store struct {
	db *gorm.DB
}

// productRow is the products table. Sold is written only in the
// transactions that insert orders, so a product is one indexed row to read
// however many orders it has.
type productRow struct {
	ID        int64     `gorm:"primaryKey"`
	Name      string    `gorm:"not null"`
	Stock     int64     `gorm:"not null"`
	Sold      int64     `gorm:"not null;default:0"`
	Fence     int64     `gorm:"not null;default:0"`
	CreatedAt time.Time `gorm:"not null"`
}

func (productRow) TableName() string { return "products" }

// orderRow is the orders table. The unique index is the last line of the
// one-order-per-user rule: it holds even when a check was skipped or raced
// (the unfenced modes). The (product, id) index serves the cursor pages of
// a product's orders.
type orderRow struct {
	ID        int64     `gorm:"primaryKey;index:idx_orders_product_id,priority:2"`
	ProductID int64     `gorm:"not null;uniqueIndex:idx_orders_product_user,priority:1;index:idx_orders_product_id,priority:1"`
	UserID    string    `gorm:"not null;size:64;uniqueIndex:idx_orders_product_user,priority:2"`
	Fence     int64     `gorm:"not null;default:0"`
	CreatedAt time.Time `gorm:"not null"`
}

func (orderRow) TableName() string { return "orders" }

// Open opens (creating if needed) the database file at path and migrates
// it. ":memory:" gives a private in-memory database on a single
// connection, for tests within one process.
func Open(path string) (*Store, error) {
	if !cgoEnabled {
		return nil, ErrNoCgo
	}
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("store: database path %q: must be a file name without '?'", path)
	}
	// Per-connection options go in the DSN so that every pooled connection
	// gets them. The journal mode is not among them: it belongs to the file
	// (see enableWAL).
	dsn := path + "?_busy_timeout=" + fmt.Sprint(busyTimeout.Milliseconds()) + "&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{
		Logger:         logger.Discard,
		TranslateError: true, // unique violations become gorm.ErrDuplicatedKey
		// Each write here is one statement or an explicit transaction; a
		// default transaction around single statements only adds latency
		// inside the critical section.
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{db: db}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
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
	if err := s.migrate(); err != nil {
		_ = s.Close()
		return nil, err
	}
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

// migrate creates or updates the tables. It runs in one (immediate)
// transaction so that processes starting together on a new file do not
// both try to create the same table, and so that exactly one of them fills
// a sold column it has just added.
func (s *Store) migrate() error {
	err := s.db.Transaction(func(tx *gorm.DB) error {
		hadSold := tx.Migrator().HasTable(&productRow{}) && tx.Migrator().HasColumn(&productRow{}, "Sold")
		if err := tx.AutoMigrate(&productRow{}, &orderRow{}); err != nil {
			return err
		}
		if hadSold {
			return nil
		}
		// A database written before sold was a column: count each
		// product's orders once. Later writes keep it.
		return tx.Exec(backfillSold).Error
	})
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return nil
}

// backfillSold sets every product's sold to the number of its orders.
const backfillSold = "UPDATE products SET sold = (SELECT COUNT(*) FROM orders WHERE orders.product_id = products.id)"

// Ping runs a trivial query, for readiness.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db.WithContext(ctx).Raw("SELECT 1").Scan(&one).Error; err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
