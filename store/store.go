// Package store keeps products and orders in SQLite or PostgreSQL through
// GORM. It is the only package with SQL in it, and it implements
// seckill.Store. Open picks the database from its argument: a URL starting
// with postgres:// or postgresql:// is a PostgreSQL server, anything else
// the path of a SQLite file.
//
// Its API is for use inside this module only: its signatures use
// internal/seckill's types, which code outside the module cannot name. The
// HTTP API is the public interface.
//
// Both databases get the same tables and the same indexes, and the
// statements with the same conditions (fence.go). What differs is how each
// is opened, how it keeps several processes apart, and how a purchase's
// statements reach it (purchasePath): one at a time through GORM on
// SQLite, a library call each (path.go); on PostgreSQL, a round trip
// each, the claim together with the reads that follow it and the write as
// one statement, through pgx (pgpath.go):
//
//   - SQLite (sqlite.go): several server processes on one host share one
//     file. It is opened in WAL mode (readers do not block the writer) with
//     a busy timeout (a writer waits for another instead of failing), and
//     every transaction starts with BEGIN IMMEDIATE, so that it takes the
//     write lock up front rather than failing when a read upgrades to a
//     write. One writer at a time, for the whole file.
//   - PostgreSQL (postgres.go): replicas on any number of hosts share one
//     server. Writers lock rows, not the database, and every transaction
//     runs at READ COMMITTED.
//
// # Why the fence stays exact under READ COMMITTED
//
// A purchase claims the product's fence, then reads, then writes in one
// transaction (package seckill, steps 4 to 6). On SQLite, each of these
// runs alone: the claim and the write each take the file's write lock. On
// PostgreSQL, READ COMMITTED gives every statement a snapshot of what was
// committed when that statement started, and concurrent writers of one row
// wait for each other's row locks. Three properties of that make the
// protocol exact:
//
//  1. The claim, UPDATE products SET fence = token WHERE id = ? AND
//     fence < token, runs in its own transaction (ClaimFence), or in one
//     with the two reads sent after it (ClaimAndRead): it locks the row,
//     and the commit releases the lock before the call returns. It leaves
//     nothing open that could block the holder's own write, and the new
//     fence is visible to every statement that starts after it.
//  2. The write repeats the fence: UPDATE ... WHERE id = ? AND fence =
//     token, in the transaction (on PostgreSQL, the statement) that
//     inserts the orders. If a newer holder's claim holds the row lock,
//     the UPDATE waits for it; when the claim commits, PostgreSQL evaluates
//     the WHERE clause again on the newest committed version of the row,
//     which carries the newer fence, so the stale write matches no row and
//     the transaction writes nothing. Once the UPDATE has matched, the
//     transaction holds the row lock until it commits, so no claim can
//     slip in between it and the inserts.
//  3. The read comes after the claim. A claim that found an earlier holder's
//     write transaction holding the row waits for its commit (or rollback)
//     before it can update the row, so by the time the claim has run every
//     write an earlier holder got accepted is committed; the read, a new
//     statement, has a snapshot that includes all of them. Nothing an earlier
//     holder writes afterwards can be accepted (2).
//
// A duplicate order is refused by the (product_id, user_id) unique index:
// an insert that meets another transaction's uncommitted order of the same
// user waits for it, and fails once that one commits, rolling back the
// whole batch with its product write. Each step has a test against a real
// server: TestPostgresStaleWriteWaitsForNewerClaimAndIsRefused (2, with the
// unfenced write as the control that goes through),
// TestPostgresClaimWaitsForEarlierWriteAndReadSeesIt (1 and 3, with a read
// before the claim as the control that misses the write), and
// TestPostgresConcurrentDuplicateRollsBackTheBatch.
//
// The isolation level is set on every connection
// (default_transaction_isolation), not taken from the server: under
// REPEATABLE READ or SERIALIZABLE the waiting write of (2) would fail with a
// serialization error instead of matching no row, which is still safe but
// turns a refused fence into an unexplained error.
//
// Row locks add one liveness hazard: a replica frozen in the middle of its
// write transaction (a long pause, a stopped process) holds the product's
// row, and every other replica's claim waits for it. The connections set
// idle_in_transaction_session_timeout (5 s), so the server ends such a
// session, rolling its write back, and the sale goes on
// (TestPostgresFrozenTransactionIsEnded).
package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/seckill-ref/seckill/internal/seckill"
)

var (
	_ seckill.Store           = (*Store)(nil)
	_ seckill.UnfencedStore   = (*Store)(nil)
	_ seckill.UnsafeLifeStore = (*Store)(nil)
)

// Store is a database of products and orders.
type Store struct {
	db   *gorm.DB
	id   string       // ID
	path purchasePath // the purchase's statements, per database
	gate writeGate    // SQLite: this process's writers, one at a time (nil: none)
}

// productRow is the products table. Sold is written only in the
// transactions that insert orders, so a product is one indexed row to read
// however many orders it has.
type productRow struct {
	ID        int64     `gorm:"primaryKey"`
	Name      string    `gorm:"not null"`
	Stock     int64     `gorm:"not null"`
	Reserved  int64     `gorm:"not null;default:0"`
	Sold      int64     `gorm:"not null;default:0"`
	Fence     int64     `gorm:"not null;default:0"`
	CreatedAt time.Time `gorm:"not null"`

	// CounterGen is the generation of the restock whose counter the
	// counter designs last recorded in stock and sold (RecordRestock); 0
	// until one is.
	CounterGen int64 `gorm:"not null;default:0"`
}

func (productRow) TableName() string { return "products" }

// orderRow is the orders table. The unique index on (product, user) over
// live orders (liveState) is the last line of the one-order-per-user rule:
// it holds even when a check was skipped or raced (the unfenced modes),
// and lets a user whose order was cancelled or expired buy again. The
// (product, id) index serves the cursor pages of a product's orders; the
// indexes over pending orders (migrateTx) serve expiry.
type orderRow struct {
	ID        int64      `gorm:"primaryKey;index:idx_orders_product_id,priority:2"`
	ProductID int64      `gorm:"not null;index:idx_orders_product_id,priority:1"`
	UserID    string     `gorm:"not null;size:64"`
	Fence     int64      `gorm:"not null;default:0"`
	CreatedAt time.Time  `gorm:"not null"`
	State     string     `gorm:"not null;size:16;default:paid"`
	ExpiresAt *time.Time // pending orders' window; NULL for orders created paid
	ClosedAt  *time.Time // when the order left pending
}

func (orderRow) TableName() string { return "orders" }

// metaRow is the seckill_meta table: facts about the database itself, by
// name. The one fact so far is "id", a random id the database is given
// when it is created (ID).
type metaRow struct {
	Name  string `gorm:"primaryKey;size:32"`
	Value string `gorm:"not null"`
}

func (metaRow) TableName() string { return "seckill_meta" }

// Open opens the database named by database and migrates it: a PostgreSQL
// server when database is a postgres:// or postgresql:// URL, otherwise a
// SQLite file at that path (created if needed; ":memory:" gives a private
// in-memory database on a single connection, for tests within one
// process). Errors never show a password from the URL.
func Open(database string) (*Store, error) {
	if err := Check(database); err != nil {
		return nil, err
	}
	open := openSQLite
	if IsPostgres(database) {
		open = openPostgres
	}
	s, err := open(database)
	if err != nil {
		return nil, err
	}
	if err := s.loadID(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// IsPostgres reports whether database names a PostgreSQL server rather
// than a SQLite file.
func IsPostgres(database string) bool {
	return strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
}

// Check reports what is wrong with database without connecting to
// anything: an empty path, a SQLite path with '?', a URL of another
// database, a PostgreSQL URL that does not parse. Open runs it first.
func Check(database string) error {
	switch {
	case IsPostgres(database):
		_, err := parsePostgres(database)
		return err
	case database == "" || strings.ContainsRune(database, '?'):
		return fmt.Errorf("store: database path %q: must be a file name without '?'", database)
	case strings.Contains(database, "://"):
		// Almost certainly a URL of a database this store does not speak,
		// not a file name: refuse it rather than create a file so named.
		return fmt.Errorf("store: database %q: only postgres:// and postgresql:// URLs are supported; anything else is a SQLite file path", Redact(database))
	}
	return nil
}

// gormConfig is the GORM configuration of both databases.
func gormConfig() *gorm.Config {
	return &gorm.Config{
		Logger:         logger.Discard,
		TranslateError: true, // unique violations become gorm.ErrDuplicatedKey
		// Each write here is one statement or an explicit transaction; a
		// default transaction around single statements only adds latency
		// inside the critical section.
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
}

// migrateTx creates or updates the tables inside tx, which the caller has
// made exclusive among processes (SQLite: BEGIN IMMEDIATE; PostgreSQL: an
// advisory lock), so that processes starting together on a new database do
// not both try to create the same table, and so that exactly one of them
// fills a sold column it has just added.
func migrateTx(tx *gorm.DB) error {
	hadSold := tx.Migrator().HasTable(&productRow{}) && tx.Migrator().HasColumn(&productRow{}, "Sold")
	if err := tx.AutoMigrate(&productRow{}, &orderRow{}, &metaRow{}, &keyRow{}); err != nil {
		return err
	}
	for _, stmt := range orderIndexes {
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&metaRow{Name: "id", Value: rand.Text()}).Error; err != nil {
		return err
	}
	if hadSold {
		return nil
	}
	// A database written before sold was a column: count each product's
	// orders once. Later writes keep it.
	return tx.Exec(backfillSold).Error
}

// ID is a random id the database was given when it was created (or when
// a database from before ids was first opened). It tells databases apart
// where they share a Redis: the counter designs name their keys with it,
// so that a new database (a reset, a test's) never meets the counters of
// another one whose products had the same ids.
func (s *Store) ID() string { return s.id }

// loadID reads the database's id into s.id, once migrated.
func (s *Store) loadID() error {
	var rows []metaRow
	if err := s.db.Where("name = ?", "id").Find(&rows).Error; err != nil || len(rows) == 0 {
		return fmt.Errorf("store: read the database's id: %w (%d rows)", err, len(rows))
	}
	s.id = rows[0].Value
	return nil
}

// liveState is the condition of a live order, written the same in every
// statement that looks a buyer up: SQLite uses a partial index only for a
// query whose WHERE clause has its condition's very terms.
const liveState = "state IN ('pending', 'paid')"

// orderIndexes are the orders table's indexes that GORM's tags cannot
// declare: partial ones. The unique index over every order (before orders
// could be cancelled or expire) gives way to the one over live orders.
var orderIndexes = []string{
	"DROP INDEX IF EXISTS idx_orders_product_user",
	"CREATE UNIQUE INDEX IF NOT EXISTS idx_orders_live ON orders (product_id, user_id) WHERE " + liveState,
	// Due orders across products (DueProducts), and one product's
	// (ExpireAll).
	"CREATE INDEX IF NOT EXISTS idx_orders_due ON orders (expires_at) WHERE state = 'pending'",
	"CREATE INDEX IF NOT EXISTS idx_orders_pending ON orders (product_id, expires_at) WHERE state = 'pending'",
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
