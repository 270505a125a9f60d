package store_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/store"
)

// waitBlocked polls until n connections to raw's database wait for a lock
// held by another transaction.
func waitBlocked(t *testing.T, raw *sql.DB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var waiting int
	err := poll.Until(ctx, 2*time.Millisecond, func() (bool, error) {
		err := raw.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return waiting >= n, err
	})
	if err != nil {
		t.Fatalf("waiting for %d connection(s) blocked on a lock: got %d (%v)", n, waiting, err)
	}
}

// stillRunning fails the test if done has an answer: the statement it
// stands for should still be waiting.
func stillRunning[T any](t *testing.T, done <-chan T, what string) {
	t.Helper()
	select {
	case v := <-done:
		t.Fatalf("%s returned (%v) while the lock it waits for is held", what, v)
	default:
	}
}

func order(productID, token int64, user string) *seckill.Order {
	return &seckill.Order{ProductID: productID, UserID: user, Fence: token, CreatedAt: time.Now()}
}

// READ COMMITTED, step 2 of store's package doc: a stale holder's write
// that meets a newer holder's claim in flight waits for the claim's row
// lock, then evaluates WHERE fence = token again on the row the claim
// committed, matches nothing, and writes nothing. The control is the same
// interleaving with the unfenced write-back: it waits just the same and
// then goes through, so it is the repeated fence condition that refuses,
// not the lock.
func TestPostgresStaleWriteWaitsForNewerClaimAndIsRefused(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		name := "fenced"
		if !fenced {
			name = "control-unfenced-write-goes-through"
		}
		t.Run(name, func(t *testing.T) {
			db := pgtest.Database(t)
			stale, newer := open(t, db), open(t, db) // two replicas
			raw := rawDB(t, db)
			ctx := context.Background()
			p := newProduct(t, stale, 5)
			// The stale holder claimed with 10 and read stock 5.
			if err := stale.ClaimFence(ctx, p.ID, 10); err != nil {
				t.Fatal(err)
			}
			// The newer holder's claim, 11, is in flight: it holds the row.
			claim, err := store.Begin(newer)
			if err != nil {
				t.Fatal(err)
			}
			defer claim.Rollback()
			if err := claim.ClaimFence(p.ID, 11); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				if fenced {
					done <- stale.PlaceOrders(ctx, p.ID, 10, 4, []*seckill.Order{order(p.ID, 10, "stale")})
				} else {
					done <- stale.SetStock(ctx, p.ID, 4)
				}
			}()
			waitBlocked(t, raw, 1)
			stillRunning(t, done, "the stale write")
			if err := claim.Commit(); err != nil {
				t.Fatal(err)
			}
			err = <-done
			got, _ := newer.Product(ctx, p.ID)
			if !fenced {
				if err != nil || got.Stock != 4 {
					t.Fatalf("unfenced write after the claim: got %v, stock %d; want nil and 4 (the lost update the fence prevents)", err, got.Stock)
				}
				return
			}
			if !errors.Is(err, seckill.ErrFenceRejected) {
				t.Fatalf("stale PlaceOrders after the newer claim committed: got %v, want ErrFenceRejected", err)
			}
			if got.Stock != 5 || got.Sold != 0 || got.Fence != 11 {
				t.Errorf("got stock %d sold %d fence %d, want 5, 0 and 11: nothing of the stale write", got.Stock, got.Sold, got.Fence)
			}
			if has, _ := newer.HasOrder(ctx, p.ID, "stale"); has {
				t.Error("the stale holder's order was inserted")
			}
		})
	}
}

// READ COMMITTED, steps 1 and 3: a claim that meets an earlier holder's
// write transaction in flight waits for it to commit, so when the claim
// returns, the earlier write is committed and the reads sent with the
// claim, which run after it, see it. The control is a read made while the
// claim waits (as a read before the claim would be): it misses the write.
// And the claim leaves nothing open: the stale holder is refused at once
// afterwards, and the new holder writes without waiting.
func TestPostgresClaimWaitsForEarlierWriteAndReadSeesIt(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	earlier, newer := open(t, db), open(t, db)
	raw := rawDB(t, db)
	ctx := context.Background()
	p := newProduct(t, earlier, 5)
	if err := earlier.ClaimFence(ctx, p.ID, 10); err != nil {
		t.Fatal(err)
	}
	// The earlier holder's write has run and is not committed yet.
	write, err := store.Begin(earlier)
	if err != nil {
		t.Fatal(err)
	}
	defer write.Rollback()
	if err := write.PlaceOrders(p.ID, 10, 3, []*seckill.Order{order(p.ID, 10, "a"), order(p.ID, 10, "b")}); err != nil {
		t.Fatal(err)
	}

	type read struct {
		p      *seckill.Product
		bought map[string]bool
		err    error
	}
	claimed := make(chan read, 1)
	go func() {
		p, bought, err := newer.ClaimAndRead(ctx, p.ID, 11, []string{"a", "b", "c"})
		claimed <- read{p, bought, err}
	}()
	waitBlocked(t, raw, 1)
	stillRunning(t, claimed, "the newer claim")
	// The control: what a read before the claim returns.
	early, err := newer.Product(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	earlyBuyers, err := newer.Buyers(ctx, p.ID, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if early.Stock != 5 || early.Sold != 0 || len(earlyBuyers) != 0 {
		t.Fatalf("read during the earlier write: got stock %d sold %d buyers %v, want 5, 0 and none (uncommitted)", early.Stock, early.Sold, earlyBuyers)
	}

	if err := write.Commit(); err != nil {
		t.Fatalf("the earlier holder's write: %v", err)
	}
	got := <-claimed
	if got.err != nil {
		t.Fatalf("the newer claim: %v", got.err)
	}
	if got.p.Stock != 3 || got.p.Sold != 2 || got.p.Fence != 11 || len(got.bought) != 2 || !got.bought["a"] || !got.bought["b"] {
		t.Errorf("read with the claim: got stock %d sold %d fence %d buyers %v; want 3, 2, 11 and a, b", got.p.Stock, got.p.Sold, got.p.Fence, got.bought)
	}

	// The claim committed on its own: nothing waits from here on.
	if err := earlier.PlaceOrders(ctx, p.ID, 10, 2, []*seckill.Order{order(p.ID, 10, "late")}); !errors.Is(err, seckill.ErrFenceRejected) {
		t.Errorf("the earlier holder again: got %v, want ErrFenceRejected", err)
	}
	if err := newer.PlaceOrders(ctx, p.ID, 11, 2, []*seckill.Order{order(p.ID, 11, "c")}); err != nil {
		t.Errorf("the newer holder's write: %v", err)
	}
}

// A batch that meets another transaction's uncommitted order of one of its
// buyers waits on the unique index and, once that order commits, fails
// with ErrAlreadyPurchased and rolls back whole: no stock, no sold, no
// order of the other buyers. The control: when the other transaction rolls
// back instead, the same batch goes through.
func TestPostgresConcurrentDuplicateRollsBackTheBatch(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := "other-commits"
		if !commit {
			name = "control-other-rolls-back"
		}
		t.Run(name, func(t *testing.T) {
			db := pgtest.Database(t)
			s, other := open(t, db), open(t, db)
			raw := rawDB(t, db)
			ctx := context.Background()
			p := newProduct(t, s, 10)
			if err := s.ClaimFence(ctx, p.ID, 7); err != nil {
				t.Fatal(err)
			}
			tx, err := store.Begin(other)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := tx.InsertOrder(order(p.ID, 0, "a")); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- s.PlaceOrders(ctx, p.ID, 7, 7, []*seckill.Order{order(p.ID, 7, "b"), order(p.ID, 7, "a"), order(p.ID, 7, "c")})
			}()
			waitBlocked(t, raw, 1)
			stillRunning(t, done, "the batch")
			end := tx.Rollback
			if commit {
				end = tx.Commit
			}
			if err := end(); err != nil {
				t.Fatal(err)
			}
			err = <-done
			got, _ := s.Product(ctx, p.ID)
			bought, berr := s.Buyers(ctx, p.ID, []string{"a", "b", "c"})
			if berr != nil {
				t.Fatal(berr)
			}
			if !commit {
				if err != nil || got.Stock != 7 || got.Sold != 3 || len(bought) != 3 {
					t.Fatalf("batch after the other rolled back: got %v, stock %d sold %d buyers %v; want nil, 7, 3, a b c", err, got.Stock, got.Sold, bought)
				}
				return
			}
			if !errors.Is(err, seckill.ErrAlreadyPurchased) {
				t.Fatalf("batch: got %v, want ErrAlreadyPurchased", err)
			}
			if got.Stock != 10 || got.Sold != 0 || len(bought) != 1 || !bought["a"] {
				t.Errorf("got stock %d sold %d buyers %v, want 10, 0 and only the other transaction's a", got.Stock, got.Sold, bought)
			}
		})
	}
}

// A replica frozen inside its write transaction holds the product's row;
// the server ends its session after idle_in_transaction_session_timeout,
// which releases the row, and the other replicas' claims go on. The
// control: with the timeout off, the claim is still waiting when its own
// deadline ends it.
func TestPostgresFrozenTransactionIsEnded(t *testing.T) {
	t.Parallel()
	for _, timeout := range []string{"300ms", "0"} {
		t.Run("idle_in_transaction_session_timeout="+timeout, func(t *testing.T) {
			db := pgtest.Database(t)
			frozen, other := open(t, db+"&idle_in_transaction_session_timeout="+timeout), open(t, db)
			ctx := context.Background()
			p := newProduct(t, frozen, 5)
			tx, err := store.Begin(frozen)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := tx.ClaimFence(p.ID, 10); err != nil {
				t.Fatal(err)
			}
			// The frozen replica sends nothing more; the other one claims.
			// Its deadline is what ends the control's wait; with the
			// session timeout on, the claim goes through once the server
			// ends the frozen session, whenever a busy machine gets to it.
			deadline := 30 * time.Second
			if timeout == "0" {
				deadline = 3 * time.Second
			}
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			err = other.ClaimFence(cctx, p.ID, 11)
			if timeout == "0" {
				if err == nil {
					t.Fatal("claim with the timeout off: got nil, want it still waiting at its deadline")
				}
				return
			}
			if err != nil {
				t.Fatalf("claim after the frozen session was ended: %v", err)
			}
			if err := tx.Commit(); err == nil {
				t.Error("the frozen transaction committed after its session was ended")
			}
			if got, _ := other.Product(ctx, p.ID); got.Fence != 11 {
				t.Errorf("fence: got %d, want 11", got.Fence)
			}
		})
	}
}

// The store runs at READ COMMITTED whatever the database's default: here
// the database says SERIALIZABLE, which a plain connection gets.
func TestPostgresPinsReadCommitted(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	u, _ := url.Parse(db)
	raw := rawDB(t, db)
	if _, err := raw.Exec(`ALTER DATABASE "` + strings.TrimPrefix(u.Path, "/") + `" SET default_transaction_isolation = 'serializable'`); err != nil {
		t.Fatal(err)
	}
	plain := rawDB(t, db) // a new pool: its connections start after the change
	var level string
	if err := plain.QueryRow("SHOW default_transaction_isolation").Scan(&level); err != nil || level != "serializable" {
		t.Fatalf("a plain connection: got %q (%v), want serializable", level, err)
	}
	level, err := store.DefaultIsolation(open(t, db))
	if err != nil || level != "read committed" {
		t.Errorf("the store's connection: got %q (%v), want read committed", level, err)
	}
}

// A bad PostgreSQL URL is refused before any connection, with a message
// that says what is wrong and never shows the password.
func TestPostgresBadURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"postgres://u:s3cret@127.0.0.1:notaport/shop", "port"},
		{"postgres://u:s3cret@127.0.0.1:70000/shop", "port"},
		{"postgres://u:s3cret@[::1/shop", "malformed"},
		{"postgres:///shop", "no host"},
		{"postgresql://u:s3cret@127.0.0.1/shop?pool_max_conns=0", "pool_max_conns"},
		{"postgres://u@127.0.0.1/shop?password=s3cret&sslmode=bogus", "sslmode"},
	} {
		err := store.Check(tc.url)
		if err == nil {
			t.Errorf("Check(%q): got nil, want an error", tc.url)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Check(%q): got %q, want one line that mentions %q and not the password", tc.url, err, tc.want)
		}
		if _, err := store.Open(tc.url); err == nil {
			t.Errorf("Open(%q): got nil, want an error", tc.url)
		}
	}
	// Several hosts, for pgx to pick the primary among: a valid URL.
	if err := store.Check("postgres://u:s3cret@db1:5432,db2:5433/shop?target_session_attrs=read-write"); err != nil {
		t.Errorf("a URL with two hosts: %v", err)
	}
}

// An unreachable server fails Open with the URL (password masked) and the
// reason, both when nothing listens and when something listens but never
// answers; the second is bounded by the connect timeout, not the kernel's.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close() // nothing listens there now
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accept, and say nothing
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct{ addr, want string }{{refusedAddr, "refused"}, {silent.Addr().String(), "timeout"}} {
		db := "postgres://shop:s3cret@" + tc.addr + "/shop?sslmode=disable"
		start := time.Now()
		s, err := store.Open(db)
		took := time.Since(start)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%s): got nil, want an error", tc.addr)
		}
		msg := err.Error()
		t.Logf("%s after %v: %s", tc.addr, took.Round(time.Millisecond), msg)
		if !strings.Contains(msg, "cannot reach PostgreSQL at postgres://shop:xxxxx@"+tc.addr) ||
			!strings.Contains(msg, tc.want) || strings.Contains(msg, "s3cret") || strings.Contains(msg, "\n") {
			t.Errorf("Open(%s): got %q, want one line naming the masked URL and %q", tc.addr, msg, tc.want)
		}
		if took > time.Minute {
			t.Errorf("Open(%s) took %v: it must give up after its timeouts", tc.addr, took)
		}
	}
}

// The pool is sized by the default or by pool_max_conns, which is not sent
// to the server (it would refuse an unknown parameter).
func TestPostgresPoolSize(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	if got := store.MaxOpenConns(open(t, db)); got != 16 {
		t.Errorf("default pool: got %d, want 16", got)
	}
	if got := store.MaxOpenConns(open(t, db+"&pool_max_conns=3")); got != 3 {
		t.Errorf("pool_max_conns=3: got %d, want 3", got)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"seckill.db": "seckill.db",
		"postgres://u:pw@db:5432/shop?sslmode=disable": "postgres://u:xxxxx@db:5432/shop?sslmode=disable",
		"postgresql://u@db/shop?password=pw":           "postgresql://u@db/shop?password=xxxxx",
		"postgres://u:p@ss@db:bad/shop":                "postgres://u:xxxxx@db:bad/shop",
		"postgres://u@db/shop":                         "postgres://u@db/shop",
	} {
		if got := store.Redact(in); got != want {
			t.Errorf("Redact(%q): got %q, want %q", in, got, want)
		}
	}
}

// A database created without UTF-8 (SQL_ASCII: what initdb makes under the
// C locale, as in some PostgreSQL images) still serves the store: the
// driver's simple-protocol statements need the client encoding UTF8, which
// the store asks for whatever the database's default.
func TestPostgresDatabaseWithoutUTF8(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	raw := rawDB(t, db)
	name := "ascii_" + strings.TrimPrefix(mustParse(t, db).Path, "/")
	if _, err := raw.Exec(`CREATE DATABASE "` + name + `" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = raw.Exec(`DROP DATABASE IF EXISTS "` + name + `" WITH (FORCE)`) })
	u := mustParse(t, db)
	u.Path = "/" + name
	// Twice: the second finds the schema made, as a replica that starts
	// after another does.
	s := open(t, u.String())
	p := newProduct(t, s, 3)
	s = open(t, u.String())
	if got, err := s.Product(context.Background(), p.ID); err != nil || got.Stock != 3 {
		t.Fatalf("product on a SQL_ASCII database: got %+v, %v; want stock 3", got, err)
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The store's statements are planned once for any arguments (a generic
// plan) and not again on each run: PostgreSQL's default plans a statement
// for its arguments on each of its first five runs, and keeps doing so
// when the generic plan's estimate looks worse, as it does for the
// statements of several products (their arrays' sizes are unknown to
// it), which then pay for planning on every run. The plans are the ones
// TestPostgresPlansUseTheBuyerIndex checks.
func TestPostgresPlansEachStatementOnce(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.Database(t)+"&pool_max_conns=1")
	ctx := context.Background()
	p, q := newProduct(t, s, 5), newProduct(t, s, 5)
	for range 8 {
		if _, _, err := s.ProductsAndBuyers(ctx, []seckill.BuyersOf{{ProductID: p.ID, UserIDs: []string{"a"}}, {ProductID: q.ID, UserIDs: []string{"b"}}}); err != nil {
			t.Fatal(err)
		}
	}
	generic, custom, err := store.Plans(s, "unnest($1::bigint[], $2::text[])")
	if err != nil {
		t.Fatal(err)
	}
	if custom != 0 || generic != 8 {
		t.Errorf("8 runs of ProductsAndBuyers' statement: %d generic plans and %d custom ones, want 8 and 0", generic, custom)
	}
}
