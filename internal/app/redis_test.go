package app_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

const secret = "s3cret-pw"

// deployment is a database file and replicas on a Redis that each test
// configures itself (URL, Sentinel, Cluster).
type deployment struct {
	t  *testing.T
	db string
}

func newDeployment(t *testing.T) *deployment {
	return &deployment{t: t, db: filepath.Join(t.TempDir(), "seckill.db")}
}

func (d *deployment) config(edit func(*app.Config)) app.Config {
	cfg := app.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Database = d.db
	cfg.AdminToken = adminToken
	cfg.RedisAddr = "" // every test here names its Redis another way
	edit(&cfg)
	return cfg
}

func (d *deployment) replica(edit func(*app.Config)) *app.Server {
	d.t.Helper()
	srv, err := app.NewServer(context.Background(), d.config(edit), nil)
	if err != nil {
		d.t.Fatalf("NewServer: %v", err)
	}
	d.t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// refused builds a server that must fail to start. It returns the error,
// after checking that it came within a bound (no hang), names want, and
// shows no password.
func (d *deployment) refused(edit func(*app.Config), want ...string) error {
	d.t.Helper()
	done := make(chan error, 1)
	go func() {
		srv, err := app.NewServer(context.Background(), d.config(edit), nil)
		if err == nil {
			_ = srv.Close()
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		d.t.Fatal("NewServer still starting after 20s; want a prompt error")
	}
	if err == nil {
		d.t.Fatalf("NewServer succeeded; want an error mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			d.t.Errorf("error %q does not mention %q", err, w)
		}
	}
	d.t.Logf("refused: %v", err)
	if strings.Contains(err.Error(), secret) {
		d.t.Errorf("error %q shows the password", err)
	}
	return err
}

// sellOut sells a product of stock items to 4*stock users through the
// replicas at once, and checks that exactly the stock was sold.
func sellOut(t *testing.T, stock int, replicas ...*app.Server) int64 {
	t.Helper()
	id := createProduct(t, replicas[0].Handler(), stock)
	statuses := rush(id, 4*stock, replicas...)
	p := getProduct(t, replicas[len(replicas)-1].Handler(), id)
	orders := allOrders(t, replicas[0].Handler(), id)
	if statuses[http.StatusCreated] != stock || p.Stock != 0 || p.Sold != int64(stock) || len(orders) != stock {
		t.Fatalf("got %v, stock %d, sold %d, %d orders; want %d sold", statuses, p.Stock, p.Sold, len(orders), stock)
	}
	return id
}

func ready(srv *app.Server) (int, string) {
	return call(srv.Handler(), http.MethodGet, "/readyz", "")
}

// REDIS_URL carries the password and the database number; the lock's keys
// land in that database.
func TestRedisURLPasswordAndDB(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t, "--requirepass", secret)
	d := newDeployment(t)
	url := func(cfg *app.Config) { cfg.RedisURL = "redis://:" + secret + "@" + r.Addr() + "/3" }
	a, b := d.replica(url), d.replica(url)
	id := sellOut(t, 20, a, b)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: secret, DB: 3})
	defer c.Close()
	if n, err := c.Exists(context.Background(), "lock:{"+seckill.LockName(id)+"}:fence").Result(); err != nil || n != 1 {
		t.Errorf("fence counter in db 3: got %d, %v; want it there", n, err)
	}
	// The password may come from REDIS_PASSWORD instead.
	c2 := d.replica(func(cfg *app.Config) {
		cfg.RedisURL = "redis://" + r.Addr() + "/3"
		cfg.RedisPassword = secret
	})
	if status, body := ready(c2); status != http.StatusOK {
		t.Errorf("readyz with REDIS_PASSWORD: %d %s", status, body)
	}
}

// A wrong or missing password, an unreachable server and TLS against a
// server without it: each a prompt error naming REDIS_URL, password masked.
func TestRedisURLRefused(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t, "--requirepass", "right-one")
	down := redistest.Start(t)
	_ = down.Stop()
	d := newDeployment(t)
	d.refused(func(cfg *app.Config) { cfg.RedisURL = "redis://:" + secret + "@" + r.Addr() }, "REDIS_URL", "xxxxx", "WRONGPASS")
	d.refused(func(cfg *app.Config) { cfg.RedisURL = "redis://" + r.Addr() }, "REDIS_URL", "NOAUTH")
	d.refused(func(cfg *app.Config) { cfg.RedisURL = "redis://:" + secret + "@" + down.Addr() }, "REDIS_URL", "cannot reach", down.Addr())
	d.refused(func(cfg *app.Config) { cfg.RedisURL = "rediss://:" + secret + "@" + r.Addr() }, "REDIS_URL", "TLS")
	d.refused(func(cfg *app.Config) { cfg.RedisURL = "redis://:" + secret + "@" + r.Addr() + "/x" }, "REDIS_URL", "database number")
}

// Two replicas lock through Sentinel (passwords on the servers and on the
// sentinels, every acquisition acknowledged by the replica) and sell
// exactly the stock.
func TestSentinelReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: Redis with Sentinel")
	}
	s := redistest.StartSentinel(t, "seckill", redistest.SentinelOptions{Password: secret, SentinelPassword: secret + "-s"})
	d := newDeployment(t)
	edit := func(cfg *app.Config) {
		cfg.RedisSentinelMaster = s.Name
		cfg.RedisSentinelAddrs = s.Addrs()
		cfg.RedisPassword = secret
		cfg.RedisSentinelPassword = secret + "-s"
		cfg.LockWaitReplicas = 1
		cfg.LockWait = time.Minute
	}
	a, b := d.replica(edit), d.replica(edit)
	if status, body := ready(a); status != http.StatusOK {
		t.Fatalf("readyz: %d %s", status, body)
	}
	sellOut(t, 30, a, b)
	// The lock is on the master, and the replica has it too: the fence
	// counter was written on one and replicated to the other.
	for _, srv := range []*redistest.Server{s.Master, s.Replica} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: secret})
		keys, err := c.Keys(context.Background(), "lock:*:fence").Result()
		_ = c.Close()
		if err != nil || len(keys) != 1 {
			t.Errorf("fence counters on %s: got %q, %v; want one", srv.Addr(), keys, err)
		}
	}
}

// A master name no sentinel knows, sentinels that do not answer, the wrong
// sentinel password, the wrong master password: each a prompt error that
// says which.
func TestSentinelRefused(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, "seckill", redistest.SentinelOptions{Password: secret, SentinelPassword: secret + "-s"})
	down := redistest.Start(t)
	_ = down.Stop()
	d := newDeployment(t)
	sentinel := func(name string, addrs []string, password string) func(*app.Config) {
		return func(cfg *app.Config) {
			cfg.RedisSentinelMaster, cfg.RedisSentinelAddrs, cfg.RedisPassword = name, addrs, password
			cfg.RedisSentinelPassword = secret + "-s"
		}
	}
	d.refused(sentinel("no-such-master", s.Addrs(), secret), "REDIS_SENTINEL", `no master named "no-such-master"`)
	d.refused(sentinel("seckill", []string{down.Addr()}, secret), "REDIS_SENTINEL_ADDRS", "no usable answer", down.Addr())
	d.refused(sentinel("seckill", s.Addrs(), "wrong-"+secret), "REDIS_SENTINEL_MASTER", "WRONGPASS")
	d.refused(func(cfg *app.Config) {
		sentinel("seckill", s.Addrs(), secret)(cfg)
		cfg.RedisSentinelPassword = ""
	}, "REDIS_SENTINEL_ADDRS", "no usable answer", "NOAUTH")
}

// Two replicas lock on a Redis Cluster of three masters and sell several
// products, whose locks live in different slots; readiness fails when a
// master is gone.
func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3, "--requirepass", secret, "--masterauth", secret)
	d := newDeployment(t)
	edit := func(cfg *app.Config) {
		cfg.RedisClusterAddrs = []string{nodes[0].Addr()}
		cfg.RedisPassword = secret
		cfg.LockWait = time.Minute
	}
	a, b := d.replica(edit), d.replica(edit)
	slots := map[int64]bool{}
	admin := redis.NewClient(&redis.Options{Addr: nodes[0].Addr(), Password: secret})
	defer admin.Close()
	for range 4 {
		id := sellOut(t, 10, a, b)
		slot, err := admin.ClusterKeySlot(context.Background(), "lock:{"+seckill.LockName(id)+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot/(16384/3)] = true
	}
	t.Logf("the products' locks live on %d of the 3 masters", len(slots))
	if status, body := ready(a); status != http.StatusOK {
		t.Fatalf("readyz: %d %s", status, body)
	}
	_ = nodes[2].Stop()
	if status, _ := ready(a); status != http.StatusServiceUnavailable {
		t.Errorf("readyz with a master down: got %d, want 503", status)
	}
}

// REDIS_ADDR with a wrong password, or none, says so in one line; a
// Config without any Redis is refused.
func TestRedisAddrRefused(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t, "--requirepass", "right-one")
	d := newDeployment(t)
	d.refused(func(cfg *app.Config) { cfg.RedisAddr, cfg.RedisPassword = r.Addr(), secret }, "REDIS_ADDR", r.Addr(), "WRONGPASS")
	d.refused(func(cfg *app.Config) { cfg.RedisAddr = r.Addr() }, "REDIS_ADDR", "NOAUTH")
	d.refused(func(cfg *app.Config) {}, "no Redis for the lock")
}

// A server that is not in cluster mode, given as a cluster node.
func TestClusterRefused(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	down := redistest.Start(t)
	_ = down.Stop()
	d := newDeployment(t)
	d.refused(func(cfg *app.Config) { cfg.RedisClusterAddrs = []string{r.Addr()} }, "REDIS_CLUSTER_ADDRS", "cluster support disabled")
	d.refused(func(cfg *app.Config) { cfg.RedisClusterAddrs = []string{down.Addr()} }, "REDIS_CLUSTER_ADDRS", "cannot reach any node")
}

// The start-up log line names the Redis by its URL with the password
// masked; the password shows nowhere in the output.
func TestRunLogsRedisURLMasked(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t, "--requirepass", secret)
	addr := freeAddr(t)
	env := envOf(map[string]string{
		"ADDR": addr, "REDIS_URL": "redis://:" + secret + "@" + r.Addr() + "/1", "LOCK_WAIT_REPLICAS": "1",
		"DATABASE": filepath.Join(t.TempDir(), "s.db"), "ADMIN_TOKEN": "x",
	})
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Main(ctx, nil, env, &stdout, &stderr) }()
	poll.Eventually(t, 10*time.Second, "/healthz", func() bool { return healthy("http://" + addr) })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Main: %v", err)
	}
	out := stdout.String() + stderr.String()
	if want := "redis=redis://:xxxxx@" + r.Addr() + "/1"; !strings.Contains(out, want) {
		t.Errorf("log does not contain %q:\n%s", want, out)
	}
	// The master has no replica: every acquisition would wait in vain.
	if !strings.Contains(out, "LOCK_WAIT_REPLICAS: the master has fewer replicas") {
		t.Errorf("no warning about the missing replica:\n%s", out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the password shows in the output:\n%s", out)
	}
}
