package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// The connection pool of one replica on PostgreSQL.
//
// Every PostgreSQL connection is a server process, and the server admits
// max_connections of them (100 by default, 3 of them reserved for
// superusers). A replica's database work per product is serial (one batch
// per lock hold); what runs in parallel is the lock-free reads of the
// sold-out and already-purchased fast paths, and a handful of connections
// per server core keeps the server busy: more only queue inside the server
// instead of in this pool, where waiting costs nothing. 16 per replica lets
// 6 replicas share a default server with room left for administration;
// ?pool_max_conns=N in the URL (the name pgxpool uses) changes it, for more
// replicas or a bigger server.
//
// Idle connections stay open (as many as the pool may hold): a flash sale
// is a burst, and opening a connection forks a server process inside the
// burst. They close after a minute of idleness, so that a replica between
// sales does not hold server processes, and after 30 minutes in any case,
// so that a replica follows a DNS change to a new primary.
const (
	pgMaxConns        = 16
	pgMaxConnsLimit   = 1000
	pgConnMaxIdleTime = time.Minute
	pgConnMaxLifetime = 30 * time.Minute
)

// pgConnectTimeout bounds one connection attempt when the URL does not set
// connect_timeout; pgOpenTimeout bounds Open's first connection as a whole
// (a host name may resolve to several addresses, each tried in turn). A
// server that does not answer (a firewall dropping packets) then fails Open
// within seconds instead of after the kernel's TCP timeout.
const (
	pgConnectTimeout = 5 * time.Second
	pgOpenTimeout    = 10 * time.Second
)

// pgIdleInTransaction is the default idle_in_transaction_session_timeout
// of the store's connections: the server ends a session that has left a
// transaction open, waiting for its client, this long. The store's
// transactions send their statements back to back, so only a client that
// froze in the middle (a long GC pause, a stopped or partitioned process)
// gets there, and while it is frozen it holds the product's row lock: every
// other replica's claim waits for it. Ending the session rolls the frozen
// write back (the fence would refuse it anyway once a newer holder claims)
// and lets the sale go on. The URL's own idle_in_transaction_session_timeout
// parameter wins.
const pgIdleInTransaction = "5s"

// migrationLockKey is the advisory lock that serializes migrations of one
// database: pg_advisory_xact_lock takes a bigint, and this one spells
// "seckill" in ASCII. Advisory locks belong to one database, so two
// services on one server do not wait for each other.
const migrationLockKey int64 = 0x7365636b696c6c

// pgSettings is a parsed PostgreSQL URL.
type pgSettings struct {
	conn     *pgx.ConnConfig
	maxConns int
}

// parsePostgres parses a postgres:// URL into pgx's configuration and the
// pool size, without connecting. Errors show the URL with its password
// masked.
func parsePostgres(raw string) (*pgSettings, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("store: database URL %s: %s", Redact(raw), fmt.Sprintf(format, a...))
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// what it says is wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, bad("malformed: %v", err)
	}
	if u.Host == "" {
		// pgx would try a Unix socket in a default directory: a server
		// of this host's own, which is not what a replica means.
		return nil, bad("no host: want postgres://user:password@host:5432/database")
	}
	set := &pgSettings{maxConns: pgMaxConns}
	q := u.Query()
	if v := q.Get("pool_max_conns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > pgMaxConnsLimit {
			return nil, bad("pool_max_conns=%q: want 1 to %d", v, pgMaxConnsLimit)
		}
		set.maxConns = n
		// pgx would send an unknown parameter to the server, which
		// refuses it.
		q.Del("pool_max_conns")
		u.RawQuery = q.Encode()
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, bad("%v", scrub(err, passwordOf(u)))
	}
	set.conn = cfg
	return set, nil
}

// openPostgres connects to the server of raw, which Check has accepted,
// sizes the pool and migrates the database.
func openPostgres(raw string) (*Store, error) {
	set, err := parsePostgres(raw)
	if err != nil {
		return nil, err
	}
	cfg := set.conn
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	// The fence's argument is made for READ COMMITTED (package doc);
	// a server or role default must not change it.
	cfg.RuntimeParams["default_transaction_isolation"] = "read committed"
	// The driver interpolates some statements itself (gorm's migrator
	// does, on an existing schema) and refuses to unless the client
	// encoding is UTF8, which a database created without UTF-8
	// (SQL_ASCII: initdb under the C locale) does not default to.
	cfg.RuntimeParams["client_encoding"] = "UTF8"
	// Each statement is planned once per connection, for any arguments:
	// by default PostgreSQL plans the statements of several products
	// again on every run, for their arrays, and that planning costs more
	// than the difference any plan makes to these index lookups (see
	// TestPostgresPlansEachStatementOnce).
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	if _, ok := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = pgIdleInTransaction
	}
	where := Redact(raw)
	sqlDB := stdlib.OpenDB(*cfg)
	sqlDB.SetMaxOpenConns(set.maxConns)
	sqlDB.SetMaxIdleConns(set.maxConns)
	sqlDB.SetConnMaxIdleTime(pgConnMaxIdleTime)
	sqlDB.SetConnMaxLifetime(pgConnMaxLifetime)

	ctx, cancel := context.WithTimeout(context.Background(), pgOpenTimeout)
	defer cancel()
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("store: cannot reach PostgreSQL at %s: %w", where, scrub(err, cfg.Password))
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), gormConfig())
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("store: open %s: %w", where, scrub(err, cfg.Password))
	}
	s := &Store{db: db, path: pgxPath{db: sqlDB}}
	// Replicas starting together each run this; the advisory lock makes
	// them take turns, for the whole transaction. Under READ COMMITTED the
	// statements after the lock see what the previous holder committed, so
	// a replica that comes second finds the tables made and the sold
	// column filled, and leaves them alone.
	err = s.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", migrationLockKey).Error; err != nil {
			return err
		}
		return migrateTx(tx)
	})
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", where, scrub(err, cfg.Password))
	}
	return s, nil
}

// Redact returns database with any password masked, for log lines and
// errors: the password of a PostgreSQL URL (user info, or a password query
// parameter) becomes "xxxxx". A SQLite path is returned as it is.
func Redact(database string) string {
	if !strings.Contains(database, "://") {
		return database
	}
	u, err := url.Parse(database)
	if err != nil {
		// Unparsable: mask from the user name's colon to the last '@', and
		// any password parameter.
		s := brokenUserinfo.ReplaceAllString(database, "${1}xxxxx@")
		return passwordParam.ReplaceAllString(s, "${1}xxxxx")
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

var (
	brokenUserinfo = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*://[^:@/]*:).*@`)
	passwordParam  = regexp.MustCompile(`([?&]password=)[^&]*`)
)

// passwordOf is the password a URL carries, in its user info or as a
// password parameter.
func passwordOf(u *url.URL) string {
	if p, ok := u.User.Password(); ok {
		return p
	}
	return u.Query().Get("password")
}

// scrub returns err with every occurrence of password in its text masked
// (also percent-encoded), keeping err for errors.Is and errors.As. The
// drivers' errors are not known to repeat a password, but a log line is
// no place to find out. It also puts a multi-line error (pgx lists every
// address it tried) on one line.
func scrub(err error, password string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if password != "" {
		for _, p := range []string{password, url.QueryEscape(password), url.PathEscape(password)} {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
