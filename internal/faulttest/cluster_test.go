package faulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/loadtest"
)

// longForm is FAULTTEST_LONG=1: bigger sales, and each sale a soak that
// goes on past its fault's phases. The default is the short form CI runs
// with `go test -race ./...`.
var longForm = os.Getenv("FAULTTEST_LONG") == "1"

// pick returns short in the default form and long with FAULTTEST_LONG=1.
func pick[T any](short, long T) T {
	if longForm {
		return long
	}
	return short
}

// faultTimeout bounds a scenario's fault goroutine as a whole, and so its
// sale, which lasts as long as the fault's phases (runSale); each of the
// fault's waits has its own, shorter deadline. Only a real failure reaches
// it: a slow machine makes the phases slower, and the sale with them.
// faultGrace is how long the fault may go on once the sale is over (it
// ended on its own, which it does only at the deadline): long enough to
// collect evidence of what it did, not to wait for progress that can no
// longer come.
const (
	faultTimeout = 90 * time.Second
	faultGrace   = 15 * time.Second
)

// soak is how long a sale lasts at least in the long form, its fault's
// phases done or not; 0 in the short form, where the sale ends with them.
var soak = pick(0, 15*time.Second)

// cluster is the shared state of one scenario's replicas: the Redis
// server(s) of the lock and one database, a SQLite file in the test's temp
// directory or a database of its own on the suite's PostgreSQL server.
type cluster struct {
	t     *testing.T
	redis []*redistest.Server
	db    string
	kind  database
}

// database names the kind of database a scenario's replicas share.
type database string

const (
	sqlite   database = "sqlite"
	postgres database = "postgres"
)

// newCluster starts nRedis redis-server processes (stopped by PID when the
// test ends) and makes a new database of the kind db. With one Redis,
// replicas get REDIS_ADDR; with three or more, REDIS_ADDRS, which makes
// their lock a Redlock.
func newCluster(t *testing.T, nRedis int, db database) *cluster {
	t.Helper()
	c := &cluster{t: t, db: filepath.Join(t.TempDir(), "seckill.db"), kind: db}
	if db == postgres {
		c.db = pgtest.Database(t)
	}
	for range nRedis {
		c.redis = append(c.redis, redistest.Start(t))
	}
	return c
}

// replica starts a replica on the cluster with env on top of the cluster's
// settings.
func (c *cluster) replica(name string, env map[string]string) *replica {
	c.t.Helper()
	e := map[string]string{"DATABASE": c.db}
	if len(c.redis) == 1 {
		e["REDIS_ADDR"] = c.redis[0].Addr()
	} else {
		addrs := make([]string, len(c.redis))
		for i, s := range c.redis {
			addrs[i] = s.Addr()
		}
		e["REDIS_ADDRS"] = strings.Join(addrs, ",")
	}
	for k, v := range env {
		e[k] = v
	}
	return startReplica(c.t, name, e)
}

// with returns a copy of base with the pairs k1, v1, k2, v2... set.
func with(base map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(base)+len(kv)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// saleConfig is a sale of an existing product against targets at rate
// requests a second. It lasts as long as the fault that runSale runs
// beside it; its Duration (and the requests it allows) only bound a sale
// whose fault never ends, and the fault's own deadline comes first. The
// load test reads the product and its orders back through the first
// target, so a replica that a fault kills must not be first.
func saleConfig(id int64, rate int, targets ...*replica) loadtest.Config {
	urls := make([]string, len(targets))
	for i, r := range targets {
		urls[i] = r.url
	}
	return loadtest.Config{
		Targets:      urls,
		AdminToken:   adminToken,
		ProductID:    id,
		Rate:         rate,
		Duration:     faultTimeout,
		MaxRequests:  int(float64(rate) * faultTimeout.Seconds()),
		Timeout:      10 * time.Second,
		ProgressMode: loadtest.ProgressOff,
	}
}

// runSale runs the load test and, in another goroutine, fault, whose
// return ends the sale: a scenario's phases pace its sale, not a length
// fixed in advance, so that a slow machine makes the sale longer rather
// than end it before the phases are done. fault gets a context that ends
// after faultTimeout, or faultGrace after the sale. When fault returns
// nil, the attack ends (loadtest.Config.End: the requests in flight are
// answered, and the sale is verified in full), after soak in the long
// form; when it fails, the sale is interrupted so that the test ends
// soon, and the test fails with fault's error. runSale returns the report
// once both are done; its text goes to the test log.
func runSale(t *testing.T, cfg loadtest.Config, fault func(ctx context.Context) error) loadtest.Report {
	t.Helper()
	saleCtx, cancelSale := context.WithCancel(context.Background())
	defer cancelSale()
	faultCtx, cancelFault := context.WithTimeout(context.Background(), faultTimeout)
	defer cancelFault()

	var (
		wg       sync.WaitGroup
		faultErr error
		out      bytes.Buffer
		rep      loadtest.Report
		runErr   error
	)
	end := make(chan struct{})
	cfg.End = end
	// A control's violation gets porcupine's visualization; the test's
	// directory keeps it out of the shared temporary directory.
	cfg.Visualization = filepath.Join(t.TempDir(), "linearizability.html")
	start := time.Now()
	wg.Go(func() {
		if faultErr = fault(faultCtx); faultErr != nil {
			cancelSale()
			return
		}
		if d := time.Until(start.Add(soak)); d > 0 {
			// The long form's soak: its length is the point.
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-faultCtx.Done():
			}
			timer.Stop()
		}
		close(end)
	})
	rep, runErr = loadtest.Run(saleCtx, cfg, &out)
	faultDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(faultDone)
	}()
	select {
	case <-faultDone:
	case <-time.After(faultGrace):
		cancelFault()
		<-faultDone
	}
	t.Logf("sale took %v:%s", time.Since(start).Round(time.Millisecond), out.String())
	if errors.Is(faultErr, errors.ErrUnsupported) {
		// Pausing a process, on Windows: the fault was never injected.
		t.Skipf("fault not injected: %v", faultErr)
	}
	if faultErr != nil {
		t.Fatalf("fault injection: %v", faultErr)
	}
	if runErr != nil {
		t.Fatalf("loadtest.Run: %v", runErr)
	}
	return rep
}

// plenty is a stock that a sale at rate cannot sell out before its
// deadline (a unit per request it may send), for the scenarios whose
// fault must find a sale still selling however long its phases take: a
// sold-out product takes no lock, and leaves nothing for the fault to
// land in, nor a sale to resume. On PostgreSQL, where every statement is
// a round trip to another process and buyers queue up into bigger batches
// on a loaded machine, it also keeps one batch from selling out what is
// left before the fault can be seen.
func plenty(rate int) int64 {
	return int64(float64(rate) * faultTimeout.Seconds())
}

// warmConns is how many product reads warmUp sends to each replica at
// once: the size of a replica's PostgreSQL pool (package store).
const warmConns = 16

// warmUp, on PostgreSQL, reads the sale's product through every target,
// warmConns at a time, before the sale: each replica then has its
// database connections open. A PostgreSQL connection is a server process,
// and on a loaded machine the dozens that the replicas' pools open in the
// sale's first burst can take seconds to start, which piles the first
// buyers up into a few big batches and leaves the faults no sale to land
// in. On SQLite it does nothing: a connection is a file handle, and the
// scenarios' timing there is as it always was.
// sale runs cfg with fault (runSale), after warming up the connections on
// PostgreSQL, and then logs notes, which fault fills in.
func (c *cluster) sale(cfg loadtest.Config, expectOversell bool, fault func(ctx context.Context) error, notes *[]string) loadtest.Report {
	c.t.Helper()
	cfg.ExpectOversell = expectOversell
	c.warmUp(cfg)
	rep := runSale(c.t, cfg, fault)
	if notes != nil {
		for _, l := range *notes {
			c.t.Log(l)
		}
	}
	return rep
}

func (c *cluster) warmUp(cfg loadtest.Config) {
	if c.kind == postgres {
		warmUp(c.t, cfg)
	}
}

func warmUp(t *testing.T, cfg loadtest.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(cfg.Targets)*warmConns)
	for _, url := range cfg.Targets {
		for range warmConns {
			wg.Go(func() {
				if _, err := apiclient.New(client, url, adminToken).Product(ctx, cfg.ProductID); err != nil {
					errs <- fmt.Errorf("warm up %s: %w", url, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// assertSafe checks the load test's safety invariants (1-5: stock >= 0,
// sold == orders, stock + sold == S, every 201 matched by an order of this
// run, no user with two orders), that the sale's history is linearizable
// (every answer fits one order of the requests, with real time), and that
// the sale ran its course.
func assertSafe(t *testing.T, rep loadtest.Report) {
	t.Helper()
	if rep.Stopped != "" {
		t.Errorf("the sale stopped early: %s", rep.Stopped)
	}
	if rep.After.Stock < 0 {
		t.Errorf("stock after the sale: got %d, want >= 0", rep.After.Stock)
	}
	for _, inv := range rep.Invariants {
		if inv.Safety && inv.Status != loadtest.Pass {
			t.Errorf("invariant (%d) %s: got %s, want PASS: %s", inv.Number, inv.Name, inv.Status, inv.Detail)
		}
	}
	if lin := rep.Linearizability; lin.Verdict != loadtest.LinYes {
		t.Errorf("got %s, want linearizable: yes", lin.Line())
	} else {
		t.Log(lin.Line())
	}
	if rep.Oversold || !rep.OK() {
		t.Errorf("verdict: got %q, want no oversell", rep.Verdict())
	}
}

// assertOversold is the negative controls' check: with the protection off,
// the checker must catch an oversell, or the scenario proves nothing.
func assertOversold(t *testing.T, rep loadtest.Report) {
	t.Helper()
	s := rep.Before.Stock + rep.Before.Sold
	t.Logf("control: S = %d, after the sale stock %d and %d sold: oversold by %d; 201s %d; %s",
		s, rep.After.Stock, rep.After.Sold, rep.After.Stock+rep.After.Sold-s, rep.Created, rep.Linearizability.Line())
	if !rep.Oversold {
		t.Errorf("with the protection off, got no oversell, want one: the scenario would not catch the failure it is about")
	}
}

// midWrites is how far stock + sold may be past S in a control without an
// update lost: the unfenced sequence inserts the order and then writes the
// stock, and each purchase between the two counts one item twice. A fault
// leaves at most two holders of a product's lock at once (the one the lock
// grants, and the one the fault kept in or split off), so at most two such
// purchases at a time; only more than that is an oversell, which stays.
const midWrites = 2

// oversoldNow reports whether p, read during a control's sale of a stock
// of s, shows an oversell rather than purchases between their two writes,
// and says what it shows.
func oversoldNow(p apiclient.Product, s int64) (bool, string) {
	return p.Stock+p.Sold > s+midWrites,
		fmt.Sprintf("oversold: stock %d + sold %d > S = %d, by more than the %d purchases that may be between their two writes", p.Stock, p.Sold, s, midWrites)
}

// assertFencesIncrease checks that orders, in id order, never carry a
// smaller fencing token than the order before: the orders of one batch
// share its holder's token, and each later batch was written by a newer
// holder.
func assertFencesIncrease(t *testing.T, orders []apiclient.Order) {
	t.Helper()
	for i := 1; i < len(orders); i++ {
		if orders[i].Fence < orders[i-1].Fence {
			t.Errorf("order %d: fence %d, below order %d's %d: tokens went backwards",
				orders[i].ID, orders[i].Fence, orders[i-1].ID, orders[i-1].Fence)
		}
	}
}

// sold reads the product's sold count through r, for faults that wait for
// progress; an error means "cannot tell yet".
func sold(ctx context.Context, r *replica, id int64) (int64, bool) {
	p, err := r.api().Product(ctx, id)
	return p.Sold, err == nil
}

// waitSold polls until the product has more than n orders, as seen
// through r.
func waitSold(ctx context.Context, r *replica, id int64, n int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll.Until(ctx, 5*time.Millisecond, func() (bool, error) {
		s, ok := sold(ctx, r, id)
		return ok && s > n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for more than %d orders: %w", n, err)
	}
	return nil
}

// A replica stopped inside a database transaction keeps what the
// transaction holds: SQLite's write lock, which every writer of the file
// needs, or PostgreSQL's lock on the product's row. The other replica then
// sells nothing until it continues, whatever happened to the leases. A
// scenario that stops a replica and waits for the other to sell gives up
// after stalledWriterWait, continues the stopped one and tries again, with
// stoppedInWrite in the attempt's note: the stop caught the replica in a
// write, not only in its critical section.
const (
	stalledWriterWait = 10 * time.Second
	stoppedInWrite    = "the stop caught it inside a database write, whose locks the other replica waits for"
)

// waitSoldOut polls until the product has no stock left, as seen through
// r: the last phase of a scenario whose sale must complete, which then
// ends its sale.
func waitSoldOut(ctx context.Context, r *replica, id int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last apiclient.Product
	err := poll.Until(ctx, 5*time.Millisecond, func() (bool, error) {
		p, err := r.api().Product(ctx, id)
		if err == nil {
			last = p
		}
		return err == nil && p.Stock <= 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the sale to sell out (last seen: stock %d, sold %d): %w", last.Stock, last.Sold, err)
	}
	return nil
}

// waitHoldStart polls until the product has at least minSold orders and
// r has since taken the product's lock anew and holds it, and returns r's
// metrics at that moment. The hold is seen at its start: before its write
// (with a chaos pause, for the pause's length), and the caller acts on r
// at once. A hold that is merely seen is often the one whose own write
// just raised the count over minSold: past its write and about to
// release, where a kill, a SIGSTOP or a Redis restart tests nothing. The
// bigger the batches, the likelier that is.
func waitHoldStart(ctx context.Context, r, observer *replica, id, minSold int64, timeout time.Duration) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var m metrics
	counted := false
	var seen float64 // r's acquisitions when the orders were counted, or since
	err := poll.Until(ctx, 2*time.Millisecond, func() (bool, error) {
		if !counted {
			if s, ok := sold(ctx, observer, id); !ok || s < minSold {
				return false, nil
			}
			var err error
			if m, err = scrape(ctx, r); err != nil {
				return false, nil
			}
			counted, seen = true, m.acquisitions()
			return false, nil
		}
		var err error
		if m, err = scrape(ctx, r); err != nil || m.acquisitions() == seen {
			return false, nil
		}
		if m.held() >= 1 {
			return true, nil
		}
		seen = m.acquisitions() // held and gone between two scrapes: wait for the next
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %s to hold the lock with %d orders made: %w", r.name, minSold, err)
	}
	return m, nil
}

// lockKey is the Redis key of a product's lock (package lock's naming:
// prefix, then the name as a hash tag).
func lockKey(id int64) string { return "lock:{" + seckill.LockName(id) + "}" }

// lockState reads who owns a product's lock in the Redis at addr (the
// lock's value without the mark " q" it carries while processes are
// queued) and how long its lease has left (-2 ms: no such key).
func lockState(ctx context.Context, addr string, id int64) (owner string, ttl time.Duration, err error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	owner, err = c.Get(ctx, lockKey(id)).Result()
	owner = strings.TrimSuffix(owner, " q")
	if errors.Is(err, redis.Nil) {
		return "", -2 * time.Millisecond, nil
	}
	if err != nil {
		return "", 0, err
	}
	ttl, err = c.PTTL(ctx, lockKey(id)).Result()
	return owner, ttl, err
}
