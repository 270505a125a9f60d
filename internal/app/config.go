package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/store"
)

// LockMode selects what guards a product's stock during a purchase.
type LockMode string

// The lock modes.
const (
	// LockRedis is the distributed lock of package lock, with fencing: the
	// only mode that is correct with several replicas.
	LockRedis LockMode = "redis"
	// LockNone takes no lock and no fence: seckill's unfenced sequence
	// bare. It oversells under concurrency; it is the control group.
	LockNone LockMode = "none"
	// LockLocal takes an in-process mutex per product, without a fence:
	// correct with one replica, oversells with two, which is why the lock
	// has to be distributed.
	LockLocal LockMode = "local"
)

// Design selects how a purchase is decided and written: the locked path
// or one of the designs people pick instead of a lock (package seckill,
// and docs/designs.md).
type Design string

// The designs.
const (
	// DesignLock is the per-product Redis lock with a fence, the batched
	// purchase of seckill.Service; LOCK chooses the lock.
	DesignLock Design = "lock"
	// DesignConditional is one database transaction, a conditional
	// UPDATE ... WHERE stock > 0 and the order's insert; no Redis.
	DesignConditional Design = "conditional"
	// DesignCounter is a stock counter in Redis, taken by a Lua script,
	// then the order's insert before the answer.
	DesignCounter Design = "redis-counter"
	// DesignCounterAsync takes from the same counter and queues the order
	// in Redis in the same script, answers 201 at once, and writes the
	// orders from the queue in the background.
	DesignCounterAsync Design = "redis-counter-async"
)

// Designs lists the designs, the default first.
var Designs = []Design{DesignLock, DesignConditional, DesignCounter, DesignCounterAsync}

// UsesRedis says whether the configuration keeps anything in Redis: the
// lock design with the redis lock mode, and the counter designs.
func (c Config) UsesRedis() bool {
	switch c.Design {
	case DesignConditional:
		return false
	case DesignLock:
		return c.Lock == LockRedis
	}
	return true
}

// Config is everything serve needs. Every field has a flag and an
// environment variable (flags win); DefaultConfig gives the defaults.
// Programs that build servers themselves (the demo) fill one in directly.
type Config struct {
	Addr      string // ADDR, -addr: listen address
	RedisAddr string // REDIS_ADDR, -redis-addr: the Redis server of the lock
	// RedisAddrs (REDIS_ADDRS, -redis-addrs: comma-separated) lists
	// independent Redis masters; when set, the lock is a Redlock over them
	// and RedisAddr is not used.
	RedisAddrs []string
	// RedlockNodeTimeout (REDLOCK_NODE_TIMEOUT, -redlock-node-timeout) is
	// lock.Options.NodeTimeout: how long an acquisition waits for each
	// Redlock node's answer before it counts that node as failed. 0 keeps
	// the lock's default, TTL/100 between 10 ms and 50 ms, which suits a
	// fast network and a client that is not saturated; a busier client
	// needs more, or it wins no quorum at all. It eats into the lease, so
	// it may be at most half the TTL.
	RedlockNodeTimeout time.Duration

	// The Redis deployment of the lock when it is not the one server of
	// RedisAddr: at most one of RedisURL, a Sentinel (master name and
	// addresses), RedisClusterAddrs and RedisAddrs may be set, and
	// ParseConfig refuses REDIS_ADDR given together with any of them
	// (redis.go).
	RedisURL              string   // REDIS_URL, -redis-url: redis://[user:password@]host:port[/db], rediss:// for TLS
	RedisSentinelMaster   string   // REDIS_SENTINEL_MASTER, -redis-sentinel-master: the master's name at the sentinels
	RedisSentinelAddrs    []string // REDIS_SENTINEL_ADDRS, -redis-sentinel-addrs: the sentinels, comma-separated
	RedisClusterAddrs     []string // REDIS_CLUSTER_ADDRS, -redis-cluster-addrs: nodes of a Redis Cluster, comma-separated
	RedisPassword         string   // REDIS_PASSWORD, -redis-password: the Redis servers' password (a URL may carry it instead)
	RedisSentinelPassword string   // REDIS_SENTINEL_PASSWORD, -redis-sentinel-password: the sentinels' own password
	// LockWaitReplicas (LOCK_WAIT_REPLICAS, -lock-wait-replicas) is
	// lock.Options.WaitReplicas: an acquisition counts only once that many
	// replicas acknowledge it, so that a failover finds the lock on the
	// replica it promotes. For a master with replicas; refused with
	// Cluster and Redlock.
	LockWaitReplicas int
	redisAddrSet     bool // REDIS_ADDR or -redis-addr was given (ParseConfig)

	// Database (DATABASE, -database) is a postgres:// or postgresql://
	// URL, for replicas on any number of hosts, or else the path of a
	// SQLite file, shared by replicas on one host (package store).
	Database   string
	AdminToken string   // ADMIN_TOKEN, -admin-token: bearer token of the admin routes
	Design     Design   // DESIGN, -design: lock, conditional, redis-counter or redis-counter-async
	Lock       LockMode // LOCK, -lock: redis, none or local; for the lock design only

	// OrderClaimIdle (ORDER_CLAIM_IDLE, -order-claim-idle) is, in the
	// redis-counter-async design, how long a queued order may stay with a
	// writer that does not write it before another replica's writer takes
	// it over (seckill.WriterOptions.ClaimIdle).
	OrderClaimIdle time.Duration

	LockTTL   time.Duration // LOCK_TTL, -lock-ttl: the lease
	LockWait  time.Duration // LOCK_WAIT, -lock-wait: longest wait for the lock before 503 busy
	LockRenew bool          // LOCK_RENEW, -lock-renew: renew leases in the background

	// BatchMax (BATCH_MAX, -batch-max) is the most purchases of one
	// product served per lock hold (group commit); 1 serves them one at a
	// time. QueueMax (QUEUE_MAX, -queue-max) is the most purchases of one
	// product that may wait in one replica; more get 503 busy at once.
	// Both apply to the fenced redis mode; the unfenced modes always sell
	// one at a time.
	BatchMax int
	QueueMax int

	// UnsafeNoFence (UNSAFE_NO_FENCE, -unsafe-no-fence) turns the fence off
	// in redis mode: no claim, no conditional write, seckill's unfenced
	// sequence under the Redis lock. A holder whose lease ran out then
	// writes over its successor, and the sale oversells. For demonstrations
	// and fault tests only; never in production. (none and local never
	// fence.)
	UnsafeNoFence bool

	// UnsafeCounterTokens (UNSAFE_COUNTER_TOKENS, no flag) makes the lock
	// issue each fencing token as the last one plus one, the server's clock
	// only when the counter is missing (lock.Options.UnsafeCounterTokens).
	// After a Redis restart from a stale snapshot the tokens go backwards,
	// and the fence refuses every purchase until the counter catches up.
	// For the fault tests' negative control only; never in production.
	UnsafeCounterTokens bool

	// ChaosPause (CHAOS_PAUSE, -chaos-pause) makes a lock holder sleep this
	// long inside the critical section, after its checks and before its
	// writes, with probability ChaosProb (CHAOS_PROB, -chaos-prob, 0..1).
	// It turns lost leases and lost updates from rare into certain.
	ChaosPause time.Duration
	ChaosProb  float64

	// Chaos, when set, is called instead of the pause above: tests use it
	// to make a holder wait for an event rather than for a time. It has no
	// flag.
	Chaos func(ctx context.Context)

	LogLevel        slog.Level    // LOG_LEVEL, -log-level: debug, info, warn or error
	ShutdownTimeout time.Duration // SHUTDOWN_TIMEOUT, -shutdown-timeout: wait for in-flight requests

	// ReadTimeout (READ_TIMEOUT, -read-timeout) bounds the reading of a
	// whole request, headers and body: a client that sends its headers and
	// then drips its body holds a connection and a goroutine no longer
	// (408 request_timeout, then the connection is closed).
	ReadTimeout time.Duration
	// WriteTimeout (WRITE_TIMEOUT, -write-timeout) bounds a request from
	// the end of its headers to the end of its response; past it the
	// connection is cut. It must be longer than the longest wait a request
	// may make inside the service (RequestWait), or buyers waiting their
	// turn would lose answers they are owed. 0, the default, derives it:
	// see HTTPWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout (IDLE_TIMEOUT, -idle-timeout) closes a keep-alive
	// connection that has carried no request for that long. It is longer
	// than a proxy's own idle limit for its upstream connections (nginx:
	// 60 s), so that the proxy closes first and never sends a request on a
	// connection the service is closing.
	IdleTimeout time.Duration
}

// writeTimeoutMargin is what a derived write timeout allows beyond the
// body's read and the waits: the database work and the response.
const writeTimeoutMargin = 5 * time.Second

// RequestWait is the longest a request may wait inside the service before
// its own work: for the product's lock (LockWait), and in the chaos pause
// of fault injection. Every new wait of a request belongs in this sum.
func (c Config) RequestWait() time.Duration {
	return addDurations(c.LockWait, c.ChaosPause)
}

// HTTPWriteTimeout is the server's write timeout: WriteTimeout when set,
// else ReadTimeout (the body may still be arriving when the write
// deadline starts) + RequestWait + 5 s for the database and the response.
func (c Config) HTTPWriteTimeout() time.Duration {
	if c.WriteTimeout > 0 {
		return c.WriteTimeout
	}
	return addDurations(c.ReadTimeout, c.RequestWait(), writeTimeoutMargin)
}

// addDurations adds the positive durations of ds, stopping at the largest
// time.Duration instead of overflowing into a negative one.
func addDurations(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		if d <= 0 {
			continue
		}
		if sum > math.MaxInt64-d {
			return math.MaxInt64
		}
		sum += d
	}
	return sum
}

// Defaults of the batching settings. BenchmarkHotProduct in internal/demo
// compares BatchMax 1 with DefaultBatchMax.
const (
	DefaultBatchMax = 64
	DefaultQueueMax = 1024
	maxBatchMax     = 1000 // seckill.MaxOrderLimit: one batch's users fit one IN list
)

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		Addr:            ":8080",
		RedisAddr:       "localhost:6379",
		Database:        "seckill.db",
		Design:          DesignLock,
		Lock:            LockRedis,
		OrderClaimIdle:  seckill.DefaultWriterClaimIdle,
		LockTTL:         10 * time.Second,
		LockWait:        2 * time.Second,
		LockRenew:       true,
		BatchMax:        DefaultBatchMax,
		QueueMax:        DefaultQueueMax,
		ChaosProb:       1,
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: 15 * time.Second,
		ReadTimeout:     10 * time.Second,
		IdleTimeout:     120 * time.Second,
	}
}

// Validate checks the settings that can be wrong.
func (c Config) Validate() error {
	var errs []error
	switch c.Lock {
	case LockRedis, LockNone, LockLocal:
	default:
		errs = append(errs, fmt.Errorf("lock mode %q: want redis, none or local", c.Lock))
	}
	errs = append(errs, c.validateDesign()...)
	if n := len(c.RedisAddrs); n > 0 && n < 3 {
		errs = append(errs, fmt.Errorf("redis addrs %v: a Redlock needs at least 3 independent masters (or use one REDIS_ADDR)", c.RedisAddrs))
	}
	errs = append(errs, c.validateRedis()...)
	if c.LockTTL < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("lock TTL %v: must be at least 10ms", c.LockTTL))
	}
	if c.LockWait <= 0 {
		errs = append(errs, fmt.Errorf("lock wait %v: must be positive", c.LockWait))
	}
	if c.BatchMax < 1 || c.BatchMax > maxBatchMax {
		errs = append(errs, fmt.Errorf("batch max %d: must be from 1 to %d", c.BatchMax, maxBatchMax))
	}
	if c.QueueMax < 1 {
		errs = append(errs, fmt.Errorf("queue max %d: must be at least 1", c.QueueMax))
	}
	if c.ChaosPause < 0 {
		errs = append(errs, fmt.Errorf("chaos pause %v: must not be negative", c.ChaosPause))
	}
	if !(c.ChaosProb >= 0 && c.ChaosProb <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("chaos probability %v: must be from 0 to 1", c.ChaosProb))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown timeout %v: must be positive", c.ShutdownTimeout))
	}
	// Without connecting: a malformed URL is reported before Redis is
	// dialled, and with its password masked.
	if err := store.Check(c.Database); err != nil {
		errs = append(errs, err)
	}
	if c.ReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("read timeout %v: must be positive", c.ReadTimeout))
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("write timeout %v: must not be negative (0 derives it)", c.WriteTimeout))
	} else if c.WriteTimeout > 0 && c.WriteTimeout <= c.RequestWait() {
		errs = append(errs, fmt.Errorf("write timeout %v: must be longer than a request's longest wait, %v (lock wait + chaos pause); or 0, which derives it", c.WriteTimeout, c.RequestWait()))
	} else if c.HTTPWriteTimeout() <= c.RequestWait() {
		errs = append(errs, fmt.Errorf("write timeout: cannot be derived: lock wait %v + chaos pause %v is longer than any timeout", c.LockWait, c.ChaosPause))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("idle timeout %v: must be positive", c.IdleTimeout))
	}
	return errors.Join(errs...)
}

// ParseConfig reads the configuration from the environment (through getenv)
// and then from args, so that a flag overrides its variable. Usage and flag
// errors go to output. It returns flag.ErrHelp for -h.
func ParseConfig(name string, args []string, getenv func(string) string, output io.Writer) (Config, error) {
	cfg := DefaultConfig()
	env := envReader{getenv: getenv}
	env.str(&cfg.Addr, "ADDR")
	env.str(&cfg.RedisAddr, "REDIS_ADDR")
	addrs := ""
	env.str(&addrs, "REDIS_ADDRS")
	env.duration(&cfg.RedlockNodeTimeout, "REDLOCK_NODE_TIMEOUT")
	sentinelAddrs, clusterAddrs := "", ""
	env.str(&cfg.RedisURL, "REDIS_URL")
	env.str(&cfg.RedisSentinelMaster, "REDIS_SENTINEL_MASTER")
	env.str(&sentinelAddrs, "REDIS_SENTINEL_ADDRS")
	env.str(&clusterAddrs, "REDIS_CLUSTER_ADDRS")
	env.str(&cfg.RedisPassword, "REDIS_PASSWORD")
	env.str(&cfg.RedisSentinelPassword, "REDIS_SENTINEL_PASSWORD")
	env.integer(&cfg.LockWaitReplicas, "LOCK_WAIT_REPLICAS")
	env.str(&cfg.Database, "DATABASE")
	env.str(&cfg.AdminToken, "ADMIN_TOKEN")
	design := string(cfg.Design)
	env.str(&design, "DESIGN")
	env.duration(&cfg.OrderClaimIdle, "ORDER_CLAIM_IDLE")
	lock := string(cfg.Lock)
	env.str(&lock, "LOCK")
	env.duration(&cfg.LockTTL, "LOCK_TTL")
	env.duration(&cfg.LockWait, "LOCK_WAIT")
	env.boolean(&cfg.LockRenew, "LOCK_RENEW")
	env.integer(&cfg.BatchMax, "BATCH_MAX")
	env.integer(&cfg.QueueMax, "QUEUE_MAX")
	env.boolean(&cfg.UnsafeNoFence, "UNSAFE_NO_FENCE")
	env.boolean(&cfg.UnsafeCounterTokens, "UNSAFE_COUNTER_TOKENS")
	env.duration(&cfg.ChaosPause, "CHAOS_PAUSE")
	env.float(&cfg.ChaosProb, "CHAOS_PROB")
	level := cfg.LogLevel.String()
	env.str(&level, "LOG_LEVEL")
	env.duration(&cfg.ShutdownTimeout, "SHUTDOWN_TIMEOUT")
	env.duration(&cfg.ReadTimeout, "READ_TIMEOUT")
	env.duration(&cfg.WriteTimeout, "WRITE_TIMEOUT")
	env.duration(&cfg.IdleTimeout, "IDLE_TIMEOUT")
	if err := errors.Join(env.errs...); err != nil {
		return cfg, err
	}

	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen `address` (env ADDR)")
	fs.StringVar(&cfg.RedisAddr, "redis-addr", cfg.RedisAddr, "Redis `host:port` of the lock (env REDIS_ADDR)")
	fs.StringVar(&addrs, "redis-addrs", addrs, "comma-separated `host:port` list of 3 or more independent Redis masters: lock with Redlock over them instead of -redis-addr (env REDIS_ADDRS)")
	fs.DurationVar(&cfg.RedlockNodeTimeout, "redlock-node-timeout", cfg.RedlockNodeTimeout, "with -redis-addrs: longest wait for each node's answer; 0: TTL/100, 10ms to 50ms (env REDLOCK_NODE_TIMEOUT)")
	fs.StringVar(&cfg.RedisURL, "redis-url", cfg.RedisURL, "Redis `URL` of the lock instead of -redis-addr: redis://[user:password@]host:port[/db], rediss:// for TLS (env REDIS_URL)")
	fs.StringVar(&cfg.RedisSentinelMaster, "redis-sentinel-master", cfg.RedisSentinelMaster, "`name` of the master at the Redis Sentinels of -redis-sentinel-addrs (env REDIS_SENTINEL_MASTER)")
	fs.StringVar(&sentinelAddrs, "redis-sentinel-addrs", sentinelAddrs, "comma-separated `host:port` list of Redis Sentinels: lock on the master they name (env REDIS_SENTINEL_ADDRS)")
	fs.StringVar(&clusterAddrs, "redis-cluster-addrs", clusterAddrs, "comma-separated `host:port` list of Redis Cluster nodes: lock on the cluster (env REDIS_CLUSTER_ADDRS)")
	fs.StringVar(&cfg.RedisPassword, "redis-password", cfg.RedisPassword, "`password` of the Redis servers; prefer the environment, which ps does not show (env REDIS_PASSWORD)")
	fs.StringVar(&cfg.RedisSentinelPassword, "redis-sentinel-password", cfg.RedisSentinelPassword, "`password` of the Redis Sentinels themselves (env REDIS_SENTINEL_PASSWORD)")
	fs.Var((*decimal)(&cfg.LockWaitReplicas), "lock-wait-replicas", "an acquisition counts once this many replicas acknowledge it (Redis WAIT); not with Cluster or Redlock (env LOCK_WAIT_REPLICAS)")
	fs.StringVar(&cfg.Database, "database", cfg.Database, "`database`: a postgres://user:password@host:5432/name URL, or a SQLite file path (env DATABASE)")
	fs.StringVar(&cfg.AdminToken, "admin-token", cfg.AdminToken, "bearer `token` of the admin routes; random and printed once when empty (env ADMIN_TOKEN)")
	fs.StringVar(&design, "design", design, "purchase `design`: lock, conditional (one UPDATE ... WHERE stock > 0 transaction, no Redis), redis-counter (a Lua counter in Redis, then the insert) or redis-counter-async (the counter, 201 at once, orders written in the background) (env DESIGN)")
	fs.DurationVar(&cfg.OrderClaimIdle, "order-claim-idle", cfg.OrderClaimIdle, "redis-counter-async: a queued order left this long with a writer that does not write it is taken over by another (env ORDER_CLAIM_IDLE)")
	fs.StringVar(&lock, "lock", lock, "lock `mode` of the lock design: redis, none (no lock: oversells) or local (in-process mutex: oversells with 2 replicas) (env LOCK)")
	fs.DurationVar(&cfg.LockTTL, "lock-ttl", cfg.LockTTL, "lock lease (env LOCK_TTL)")
	fs.DurationVar(&cfg.LockWait, "lock-wait", cfg.LockWait, "longest wait for a lock before 503 busy (env LOCK_WAIT)")
	fs.BoolVar(&cfg.LockRenew, "lock-renew", cfg.LockRenew, "renew leases in the background (env LOCK_RENEW)")
	fs.Var((*decimal)(&cfg.BatchMax), "batch-max", "most purchases of one product served per lock hold (group commit); 1 serves them one at a time (env BATCH_MAX)")
	fs.Var((*decimal)(&cfg.QueueMax), "queue-max", "most purchases of one product waiting in this replica; more get 503 busy at once (env QUEUE_MAX)")
	fs.BoolVar(&cfg.UnsafeNoFence, "unsafe-no-fence", cfg.UnsafeNoFence, "UNSAFE, for demonstrations: turn fencing off in redis mode, so a holder whose lease ran out can oversell (env UNSAFE_NO_FENCE)")
	fs.DurationVar(&cfg.ChaosPause, "chaos-pause", cfg.ChaosPause, "fault injection: lock holders sleep this long between their checks and their writes (env CHAOS_PAUSE)")
	fs.Float64Var(&cfg.ChaosProb, "chaos-prob", cfg.ChaosProb, "fault injection: `probability` (0..1) of the chaos pause (env CHAOS_PROB)")
	fs.StringVar(&level, "log-level", level, "log `level`: debug, info, warn or error (env LOG_LEVEL)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long shutdown waits for in-flight requests (env SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&cfg.ReadTimeout, "read-timeout", cfg.ReadTimeout, "longest read of a whole request, body included (env READ_TIMEOUT)")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "longest time from a request's headers to the end of its response; longer than -lock-wait; 0 derives it: read timeout + lock wait + chaos pause + 5s (env WRITE_TIMEOUT)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close keep-alive connections idle this long (env IDLE_TIMEOUT)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.Lock = LockMode(strings.ToLower(lock))
	cfg.Design = Design(strings.ToLower(design))
	cfg.RedisSentinelAddrs, cfg.RedisClusterAddrs = commaList(sentinelAddrs), commaList(clusterAddrs)
	cfg.redisAddrSet = getenv("REDIS_ADDR") != ""
	fs.Visit(func(f *flag.Flag) { cfg.redisAddrSet = cfg.redisAddrSet || f.Name == "redis-addr" })
	cfg.RedisAddrs = nil
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.RedisAddrs = append(cfg.RedisAddrs, a)
		}
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(level)); err != nil {
		return cfg, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	return cfg, cfg.Validate()
}

// Environ is c as the environment variables ParseConfig reads, NAME=value,
// for starting a replica with c in a process of its own. For a Config that
// ParseConfig returned, ParseConfig of them gives it back. Chaos, a
// function, has no variable and is left out; so are empty strings and
// lists, which ParseConfig reads as unset (an empty Addr or Database comes
// back as the default). REDIS_ADDR is set when RedisAddr was given or is
// not the default.
func (c Config) Environ() []string {
	d := func(v time.Duration) string { return v.String() }
	vars := [][2]string{
		{"ADDR", c.Addr},
		{"REDIS_ADDRS", strings.Join(c.RedisAddrs, ",")},
		{"REDLOCK_NODE_TIMEOUT", d(c.RedlockNodeTimeout)},
		{"REDIS_URL", c.RedisURL},
		{"REDIS_SENTINEL_MASTER", c.RedisSentinelMaster},
		{"REDIS_SENTINEL_ADDRS", strings.Join(c.RedisSentinelAddrs, ",")},
		{"REDIS_CLUSTER_ADDRS", strings.Join(c.RedisClusterAddrs, ",")},
		{"REDIS_PASSWORD", c.RedisPassword},
		{"REDIS_SENTINEL_PASSWORD", c.RedisSentinelPassword},
		{"LOCK_WAIT_REPLICAS", strconv.Itoa(c.LockWaitReplicas)},
		{"DATABASE", c.Database},
		{"ADMIN_TOKEN", c.AdminToken},
		{"DESIGN", string(c.Design)},
		{"ORDER_CLAIM_IDLE", d(c.OrderClaimIdle)},
		{"LOCK", string(c.Lock)},
		{"LOCK_TTL", d(c.LockTTL)},
		{"LOCK_WAIT", d(c.LockWait)},
		{"LOCK_RENEW", strconv.FormatBool(c.LockRenew)},
		{"BATCH_MAX", strconv.Itoa(c.BatchMax)},
		{"QUEUE_MAX", strconv.Itoa(c.QueueMax)},
		{"UNSAFE_NO_FENCE", strconv.FormatBool(c.UnsafeNoFence)},
		{"UNSAFE_COUNTER_TOKENS", strconv.FormatBool(c.UnsafeCounterTokens)},
		{"CHAOS_PAUSE", d(c.ChaosPause)},
		{"CHAOS_PROB", strconv.FormatFloat(c.ChaosProb, 'g', -1, 64)},
		{"LOG_LEVEL", c.LogLevel.String()},
		{"SHUTDOWN_TIMEOUT", d(c.ShutdownTimeout)},
		{"READ_TIMEOUT", d(c.ReadTimeout)},
		{"WRITE_TIMEOUT", d(c.WriteTimeout)},
		{"IDLE_TIMEOUT", d(c.IdleTimeout)},
	}
	// REDIS_ADDR only when it was given or changed: its presence is what
	// tells ParseConfig that a Redis URL or Sentinel list conflicts with it.
	if c.redisAddrSet || c.RedisAddr != DefaultConfig().RedisAddr {
		vars = append(vars, [2]string{"REDIS_ADDR", c.RedisAddr})
	}
	var env []string
	for _, v := range vars {
		if v[1] != "" {
			env = append(env, v[0]+"="+v[1])
		}
	}
	return env
}

// validateDesign refuses an unknown design, and the lock design's
// settings given with another design, where they would silently do
// nothing.
func (c Config) validateDesign() []error {
	var errs []error
	switch c.Design {
	case DesignLock:
		return nil
	case DesignConditional, DesignCounter, DesignCounterAsync:
	default:
		return []error{fmt.Errorf("design %q: want %s", c.Design, designList())}
	}
	if c.Lock != LockRedis {
		errs = append(errs, fmt.Errorf("LOCK=%s is a lock mode of the lock design, not of DESIGN=%s: drop it", c.Lock, c.Design))
	}
	if c.UnsafeNoFence || c.UnsafeCounterTokens {
		errs = append(errs, fmt.Errorf("UNSAFE_NO_FENCE and UNSAFE_COUNTER_TOKENS switch off parts of the lock design, not of DESIGN=%s: drop them", c.Design))
	}
	if c.Design != DesignConditional && len(c.RedisAddrs) > 0 {
		errs = append(errs, fmt.Errorf("DESIGN=%s keeps its counters in one Redis (REDIS_ADDR, REDIS_URL, Sentinel or Cluster), not in a Redlock's independent masters (REDIS_ADDRS)", c.Design))
	}
	if c.OrderClaimIdle <= 0 {
		errs = append(errs, fmt.Errorf("order claim idle %v: must be positive", c.OrderClaimIdle))
	}
	return errs
}

// designList is the designs' names for messages: "lock, conditional, ...".
func designList() string {
	names := make([]string, len(Designs))
	for i, d := range Designs {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}

// decimal is an int flag read in base 10 only, as its environment variable
// is: flag.IntVar would read "010" as octal 8 and "0x10" as 16.
type decimal int

func (d *decimal) String() string { return strconv.Itoa(int(*d)) }

func (d *decimal) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		var num *strconv.NumError
		if errors.As(err, &num) {
			return num.Err
		}
		return err
	}
	*d = decimal(n)
	return nil
}

// envReader parses environment variables into config fields, keeping the
// default when a variable is unset or empty, and collecting every error so
// that one run reports them all.
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (r *envReader) str(dst *string, name string) {
	if v := r.getenv(name); v != "" {
		*dst = v
	}
}

func (r *envReader) duration(dst *time.Duration, name string) {
	r.parse(name, func(v string) error {
		d, err := time.ParseDuration(v)
		*dst = d
		return err
	})
}

func (r *envReader) boolean(dst *bool, name string) {
	r.parse(name, func(v string) error {
		b, err := strconv.ParseBool(v)
		*dst = b
		return err
	})
}

func (r *envReader) integer(dst *int, name string) {
	r.parse(name, func(v string) error {
		n, err := strconv.Atoi(v)
		*dst = n
		return err
	})
}

func (r *envReader) float(dst *float64, name string) {
	r.parse(name, func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		*dst = f
		return err
	})
}

func (r *envReader) parse(name string, set func(string) error) {
	v := r.getenv(name)
	if v == "" {
		return
	}
	if err := set(v); err != nil {
		var num *strconv.NumError
		if errors.As(err, &num) {
			err = num.Err // "invalid syntax" rather than the whole call
		}
		r.errs = append(r.errs, fmt.Errorf("environment variable %s=%q: %w", name, v, err))
	}
}
