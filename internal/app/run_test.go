package app_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// syncBuffer is a bytes.Buffer that the server's goroutines may write while
// the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func healthy(url string) bool {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get(url + "/healthz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// Main serves until its context ends, prints a random admin token once when
// none is set, and returns nil after a clean shutdown.
func TestRunServe(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	addr := freeAddr(t)
	env := envOf(map[string]string{
		"ADDR": addr, "REDIS_ADDR": r.Addr(), "DATABASE": filepath.Join(t.TempDir(), "s.db"), "LOG_LEVEL": "warn",
	})
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Main(ctx, nil, env, &stdout, &stderr) }()
	url := "http://" + addr
	poll.Eventually(t, 10*time.Second, "/healthz", func() bool { return healthy(url) })

	m := regexp.MustCompile(`admin token: (\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no admin token printed; stdout: %q", stdout.String())
	}
	req, _ := http.NewRequest("POST", url+"/api/v1/products", strings.NewReader(`{"name":"x","stock":1}`))
	req.Header.Set("Authorization", "Bearer "+m[1])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Errorf("create with the printed token: got %d, want 201", res.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Main: got %v, want nil after shutdown; stderr: %s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Main did not return after its context ended")
	}
	if healthy(url) {
		t.Error("still answering after shutdown")
	}
}

// Without Redis, serve says what it tried and how to get a Redis, and
// creates no database file.
func TestRunRedisUnreachable(t *testing.T) {
	t.Parallel()
	redisAddr := freeAddr(t) // nothing listens there
	db := filepath.Join(t.TempDir(), "s.db")
	env := envOf(map[string]string{"REDIS_ADDR": redisAddr, "DATABASE": db, "ADMIN_TOKEN": "x", "ADDR": freeAddr(t)})
	err := app.Main(context.Background(), nil, env, &syncBuffer{}, &syncBuffer{})
	if err == nil {
		t.Fatal("got nil, want an error")
	}
	for _, want := range []string{redisAddr, "redis-server --port 6379", "go run . demo"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, serr := os.Stat(db); !os.IsNotExist(serr) {
		t.Errorf("database file created anyway (stat: %v)", serr)
	}
}

// A bad database setting stops serve at start with one line that says
// what is wrong and masks the password: a malformed URL before Redis is
// even dialled (none is running here), an unreachable server after.
func TestRunDatabaseErrors(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	for _, tc := range []struct {
		name, redis, db, want string
	}{
		{"malformed", freeAddr(t), "postgres://shop:s3cret@127.0.0.1:x/shop", "port"},
		{"unreachable", r.Addr(), "postgres://shop:s3cret@" + freeAddr(t) + "/shop?sslmode=disable", "cannot reach PostgreSQL at postgres://shop:xxxxx@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr syncBuffer
			env := envOf(map[string]string{"REDIS_ADDR": tc.redis, "DATABASE": tc.db, "ADMIN_TOKEN": "x", "ADDR": freeAddr(t)})
			err := app.Main(context.Background(), nil, env, &syncBuffer{}, &stderr)
			if err == nil {
				t.Fatal("got nil, want an error")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "s3cret") || strings.Contains(msg, "\n") {
				t.Errorf("got %q, want one line with %q and without the password", msg, tc.want)
			}
			if strings.Contains(stderr.String(), "s3cret") {
				t.Errorf("the log shows the password: %s", stderr.String())
			}
		})
	}
}

// On PostgreSQL, serve logs the database URL with its password masked.
func TestRunServePostgresMasksThePassword(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	db, _ := url.Parse(pgtest.Database(t))
	db.User = url.UserPassword(db.User.Username(), "s3cret") // the test server trusts every local user
	addr := freeAddr(t)
	env := envOf(map[string]string{"ADDR": addr, "REDIS_ADDR": r.Addr(), "DATABASE": db.String(), "ADMIN_TOKEN": "x", "LOG_LEVEL": "info"})
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Main(ctx, nil, env, &syncBuffer{}, &stderr) }()
	poll.Eventually(t, 10*time.Second, "/healthz", func() bool { return healthy("http://" + addr) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Main: %v", err)
	}
	log := stderr.String()
	if !strings.Contains(log, "xxxxx@127.0.0.1") || strings.Contains(log, "s3cret") {
		t.Errorf("log: want the URL with the password masked, and never the password:\n%s", log)
	}
}

// -h prints the flags and is not an error. The command table around Main
// is tested in package main.
func TestMainHelp(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	if err := app.Main(context.Background(), []string{"-h"}, envOf(nil), &out, &out); err != nil || !strings.Contains(out.String(), "-redis-addr") {
		t.Errorf("-h: got %v and %q, want nil and the flags", err, out.String())
	}
}

// Shutdown lets an in-flight purchase finish and release its lock before
// Serve returns.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	inside, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := c.replica(func(cfg *app.Config) {
		cfg.Chaos = func(context.Context, []int64) {
			once.Do(func() { close(inside); <-proceed })
		}
	})
	id := createProduct(t, srv.Handler(), 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	type result struct {
		status int
		err    error
	}
	bought := make(chan result, 1)
	go func() {
		res, err := http.Post(url+"/api/v1/products/"+strconv.FormatInt(id, 10)+"/purchase", "application/json",
			strings.NewReader(`{"user_id":"late"}`))
		if err != nil {
			bought <- result{err: err}
			return
		}
		res.Body.Close()
		bought <- result{status: res.StatusCode}
	}()
	<-inside
	cancel()
	// Once the listener is closed, shutdown is under way, with our purchase
	// still holding the lock.
	poll.Eventually(t, 10*time.Second, "the listener to close", func() bool {
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v with a request in flight", err)
	default:
	}
	close(proceed)
	if r := <-bought; r.err != nil || r.status != http.StatusCreated {
		t.Errorf("in-flight purchase: got %d, %v; want 201", r.status, r.err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: got %v, want nil", err)
	}
	// The lock was released: another process takes it at once.
	l, err := lock.New(c.redis.Client(), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.TryAcquire(context.Background(), seckill.LockName(id))
	if err != nil {
		t.Fatalf("lock still held after shutdown: %v", err)
	}
	_ = lk.Release(context.Background())
}
