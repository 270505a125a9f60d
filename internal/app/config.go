package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
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

// Config is everything serve needs. The settings table (settings.go) names
// each field's environment variable and flag (flags win); DefaultConfig
// gives the defaults. Programs that build servers themselves (the demo)
// fill one in directly.
type Config struct {
	Addr      string // listen address
	RedisAddr string // the Redis server of the lock
	// RedisAddrs (comma-separated) lists independent Redis masters; when set,
	// the lock is a Redlock over them and RedisAddr is not used.
	RedisAddrs []string
	// RedlockNodeTimeout is lock.Options.NodeTimeout: how long an
	// acquisition waits for each Redlock node's answer before it counts
	// that node as failed. 0 keeps the lock's default, TTL/100 between
	// 10 ms and 50 ms, which suits a fast network and a client that is not
	// saturated; a busier client needs more, or it wins no quorum at all.
	// It eats into the lease, so it may be at most half the TTL.
	RedlockNodeTimeout time.Duration

	// The Redis deployment of the lock when it is not the one server of
	// RedisAddr: at most one of RedisURL, a Sentinel (master name and
	// addresses), RedisClusterAddrs and RedisAddrs may be set, and ParseConfig
	// refuses REDIS_ADDR given together with any of them (redis.go).
	RedisURL              string   // redis://[user:password@]host:port[/db], rediss:// for TLS
	RedisSentinelMaster   string   // the master's name at the sentinels
	RedisSentinelAddrs    []string // the sentinels, comma-separated
	RedisClusterAddrs     []string // nodes of a Redis Cluster, comma-separated
	RedisPassword         string   // the Redis servers' password (a URL may carry it instead)
	RedisSentinelPassword string   // the sentinels' own password
	// LockWaitReplicas is lock.Options.WaitReplicas: an acquisition counts
	// only once that many replicas acknowledge it, so that a failover finds
	// the lock on the replica it promotes. For a master with replicas; refused
	// with Cluster and Redlock.
	LockWaitReplicas int
	redisAddrSet     bool // REDIS_ADDR or -redis-addr was given (ParseConfig)

	// Database is a postgres:// or postgresql:// URL, for replicas on any
	// number of hosts, or else the path of a SQLite file, shared by replicas
	// on one host (package store).
	Database   string
	AdminToken string   // bearer token of the admin routes
	Design     Design   // lock, conditional, redis-counter or redis-counter-async
	Lock       LockMode // redis, none or local; for the lock design only

	// OrderClaimIdle is, in the redis-counter-async design, how long a queued
	// order may stay with a writer that does not write it before another
	// replica's writer takes it over (seckill.WriterOptions.ClaimIdle).
	OrderClaimIdle time.Duration

	LockTTL   time.Duration // the lease
	LockWait  time.Duration // longest wait for the lock before 503 busy
	LockRenew bool          // renew leases in the background

	// BatchMax is the most purchases of one product served per lock hold
	// (group commit); 1 serves them one at a time. QueueMax is the most
	// purchases of one product that may wait in one replica; more get 503 busy
	// at once. Both apply to the fenced redis mode; the unfenced modes always
	// sell one at a time.
	BatchMax int
	QueueMax int

	// UnsafeNoFence turns the fence off in redis mode: no claim, no
	// conditional write, seckill's unfenced sequence under the Redis lock. A
	// holder whose lease ran out then writes over its successor, and the sale
	// oversells. For demonstrations and fault tests only; never in production.
	// (none and local never fence.)
	UnsafeNoFence bool

	// UnsafeCounterTokens makes the lock issue each fencing token as the last
	// one plus one, the server's clock only when the counter is missing
	// (lock.Options.UnsafeCounterTokens). After a Redis restart from a stale
	// snapshot the tokens go backwards, and the fence refuses every purchase
	// until the counter catches up. For the fault tests' negative control
	// only; never in production.
	UnsafeCounterTokens bool

	// UnsafeExpiry ("unlocked" or "unchecked") and UnsafePayLate switch
	// off one safeguard of a reservation's life each
	// (seckill.Options.UnsafeExpiry, UnsafePayLate): for demonstrations
	// and the controls of the checks only; never in production.
	UnsafeExpiry  string
	UnsafePayLate bool

	// ChaosPause makes a lock holder sleep this long inside the critical
	// section, after its checks and before its writes, with probability
	// ChaosProb (0..1). It turns lost leases and lost updates from rare into
	// certain.
	ChaosPause time.Duration
	ChaosProb  float64

	// Chaos, when set, is called instead of the pause above: tests use it to
	// make a holder wait for an event rather than for a time. It has no flag.
	Chaos func(ctx context.Context, products []int64)

	// PayWindow, when positive, makes a purchase a reservation that the
	// buyer pays or cancels within it, or that expires (seckill.Options).
	// ExpireInterval is how often each replica expires due reservations;
	// 0 derives it (ExpiryEvery).
	PayWindow      time.Duration
	ExpireInterval time.Duration

	// IdempotencyTTL is how long the record of an Idempotency-Key is kept
	// from its first use: a retry with the key within it gets the first
	// answer. At least PayWindow, so that a buyer who lost the answer to a
	// purchase can learn it for as long as the order can be paid.
	IdempotencyTTL time.Duration

	// ChaosExpiryPause makes an expiry sleep this long inside its critical
	// section, before its write; ExpiryChaos, when set, is called instead
	// (tests; no flag).
	ChaosExpiryPause time.Duration
	ExpiryChaos      func(ctx context.Context, products []int64)

	LogLevel        slog.Level    // debug, info, warn or error
	ShutdownTimeout time.Duration // wait for in-flight requests

	// ReadTimeout bounds the reading of a whole request, headers and body: a
	// client that sends its headers and then drips its body holds a connection
	// and a goroutine no longer (408 request_timeout, then the connection is
	// closed).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end of
	// its response; past it the connection is cut. It must be longer than the
	// longest wait a request may make inside the service (RequestWait), or
	// buyers waiting their turn would lose answers they are owed. 0, the
	// default, derives it: see HTTPWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has carried no request
	// for that long. It is longer than a proxy's own idle limit for its
	// upstream connections (nginx: 60 s), so that the proxy closes first and
	// never sends a request on a connection the service is closing.
	IdleTimeout time.Duration
}

// ExpiryEvery is how often each replica expires due reservations:
// ExpireInterval when set, else a tenth of the payment window, from 50 ms
// to 1 s (1 s without a window: only orders an earlier run left pending
// can be due). An order is expired within about this long after its
// window ends, plus a round's work.
func (c Config) ExpiryEvery() time.Duration {
	switch {
	case c.ExpireInterval > 0:
		return c.ExpireInterval
	case c.PayWindow <= 0:
		return time.Second
	}
	return min(max(c.PayWindow/10, 50*time.Millisecond), time.Second)
}

// KeySweepEvery is how often each replica deletes expired idempotency
// keys: a tenth of IdempotencyTTL, from 100 ms to a minute. A key is kept
// at least IdempotencyTTL and gone within about this long after.
func (c Config) KeySweepEvery() time.Duration {
	return min(max(c.IdempotencyTTL/10, 100*time.Millisecond), time.Minute)
}

// writeTimeoutMargin is what a derived write timeout allows beyond the
// body's read and the waits: the database work and the response.
const writeTimeoutMargin = 5 * time.Second

// RequestWait is the longest a request may wait inside the service before
// its own work: for the product's lock (LockWait), and in the chaos pause
// of fault injection (in redis-counter, a cancel's pause between the
// database and the counter too). Every new wait of a request belongs in
// this sum.
func (c Config) RequestWait() time.Duration {
	pause := c.ChaosPause
	if c.Design == DesignCounter {
		pause = addDurations(pause, c.ChaosExpiryPause)
	}
	return addDurations(c.LockWait, pause)
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
		IdempotencyTTL:  24 * time.Hour,
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
	if c.ChaosExpiryPause < 0 {
		errs = append(errs, fmt.Errorf("chaos expiry pause %v: must not be negative", c.ChaosExpiryPause))
	}
	if c.PayWindow < 0 || c.ExpireInterval < 0 {
		errs = append(errs, fmt.Errorf("pay window %v, expire interval %v: must not be negative", c.PayWindow, c.ExpireInterval))
	}
	if c.IdempotencyTTL <= 0 {
		errs = append(errs, fmt.Errorf("idempotency TTL %v: must be positive", c.IdempotencyTTL))
	} else if c.IdempotencyTTL < c.PayWindow {
		errs = append(errs, fmt.Errorf("idempotency TTL %v: must be at least the pay window, %v, so that a buyer who retries a purchase gets its answer for as long as its order can be paid", c.IdempotencyTTL, c.PayWindow))
	}
	if _, err := seckill.ParseUnsafeExpiry(c.UnsafeExpiry); err != nil {
		errs = append(errs, err)
	}
	if c.PayWindow > 0 && c.Design == DesignCounterAsync {
		errs = append(errs, fmt.Errorf("pay window %v: %s answers 201 before the order exists (no id to pay or cancel with until a writer writes it), so a buyer could not be sure to pay within a window; use redis-counter, conditional or lock", c.PayWindow, c.Design))
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
// and then from args, so that a flag overrides its variable (the table of
// settings.go). Usage and flag errors go to output. It returns
// flag.ErrHelp for -h.
func ParseConfig(name string, args []string, getenv func(string) string, output io.Writer) (Config, error) {
	cfg := DefaultConfig()
	if err := readEnv(&cfg, getenv); err != nil {
		return cfg, err
	}
	fs := flagSet(name, &cfg)
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.redisAddrSet = getenv("REDIS_ADDR") != ""
	fs.Visit(func(f *flag.Flag) { cfg.redisAddrSet = cfg.redisAddrSet || f.Name == "redis-addr" })
	return cfg, cfg.Validate()
}

// Environ is c as the environment variables ParseConfig reads, NAME=value,
// for starting a replica with c in a process of its own. For a Config that
// ParseConfig returned, ParseConfig of them gives it back. Chaos, a
// function, has no variable and is left out; so are empty strings and
// lists, which ParseConfig reads as unset (an empty Addr or Database comes
// back as the default). REDIS_ADDR is set only when RedisAddr was given or
// is not the default: its presence is what tells ParseConfig that a Redis
// URL or Sentinel list conflicts with it.
func (c Config) Environ() []string {
	var env []string
	for _, s := range settings {
		if s.env == "REDIS_ADDR" && !c.redisAddrSet && c.RedisAddr == DefaultConfig().RedisAddr {
			continue
		}
		if v := s.field(&c).String(); v != "" {
			env = append(env, s.env+"="+v)
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
	if c.UnsafeNoFence || c.UnsafeCounterTokens || c.UnsafeExpiry != "" || c.UnsafePayLate {
		errs = append(errs, fmt.Errorf("UNSAFE_NO_FENCE, UNSAFE_COUNTER_TOKENS, UNSAFE_EXPIRY and UNSAFE_PAY_LATE switch off parts of the lock design, not of DESIGN=%s: drop them", c.Design))
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
