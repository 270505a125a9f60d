package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// settings are the configuration's settings, each declared here once: its
// environment variable, its flag (none for a few that only fault tests
// set), its help, and the Config field it fills. ParseConfig reads the
// environment and then the flags from this table, Environ writes the table
// back, and TestConfigurationDocMatchesSettings keeps docs/configuration.md
// in step with it. The Config fields say what each setting means.
var settings = []setting{
	{"ADDR", "addr", "listen `address`", str(func(c *Config) *string { return &c.Addr })},
	{"REDIS_ADDR", "redis-addr", "Redis `host:port` of the lock", str(func(c *Config) *string { return &c.RedisAddr })},
	{"REDIS_ADDRS", "redis-addrs", "comma-separated `host:port` list of 3 or more independent Redis masters: lock with Redlock over them instead of -redis-addr", list(func(c *Config) *[]string { return &c.RedisAddrs })},
	{"REDLOCK_NODE_TIMEOUT", "redlock-node-timeout", "with -redis-addrs: longest wait for each node's answer; 0: TTL/100, 10ms to 50ms", duration(func(c *Config) *time.Duration { return &c.RedlockNodeTimeout })},
	{"REDIS_URL", "redis-url", "Redis `URL` of the lock instead of -redis-addr: redis://[user:password@]host:port[/db], rediss:// for TLS", str(func(c *Config) *string { return &c.RedisURL })},
	{"REDIS_SENTINEL_MASTER", "redis-sentinel-master", "`name` of the master at the Redis Sentinels of -redis-sentinel-addrs", str(func(c *Config) *string { return &c.RedisSentinelMaster })},
	{"REDIS_SENTINEL_ADDRS", "redis-sentinel-addrs", "comma-separated `host:port` list of Redis Sentinels: lock on the master they name", list(func(c *Config) *[]string { return &c.RedisSentinelAddrs })},
	{"REDIS_CLUSTER_ADDRS", "redis-cluster-addrs", "comma-separated `host:port` list of Redis Cluster nodes: lock on the cluster", list(func(c *Config) *[]string { return &c.RedisClusterAddrs })},
	{"REDIS_PASSWORD", "redis-password", "`password` of the Redis servers; prefer the environment, which ps does not show", str(func(c *Config) *string { return &c.RedisPassword })},
	{"REDIS_SENTINEL_PASSWORD", "redis-sentinel-password", "`password` of the Redis Sentinels themselves", str(func(c *Config) *string { return &c.RedisSentinelPassword })},
	{"LOCK_WAIT_REPLICAS", "lock-wait-replicas", "an acquisition counts once this many replicas acknowledge it (Redis WAIT); not with Cluster or Redlock", integer(func(c *Config) *int { return &c.LockWaitReplicas })},
	{"DATABASE", "database", "`database`: a postgres://user:password@host:5432/name URL, or a SQLite file path", str(func(c *Config) *string { return &c.Database })},
	{"ADMIN_TOKEN", "admin-token", "bearer `token` of the admin routes; random and printed once when empty", str(func(c *Config) *string { return &c.AdminToken })},
	{"DESIGN", "design", "purchase `design`: lock, conditional (one UPDATE ... WHERE stock > 0 transaction, no Redis), redis-counter (a Lua counter in Redis, then the insert) or redis-counter-async (the counter, 201 at once, orders written in the background)", lower(func(c *Config) *string { return (*string)(&c.Design) })},
	{"ORDER_CLAIM_IDLE", "order-claim-idle", "redis-counter-async: a queued order left this long with a writer that does not write it is taken over by another", duration(func(c *Config) *time.Duration { return &c.OrderClaimIdle })},
	{"LOCK", "lock", "lock `mode` of the lock design: redis, none (no lock: oversells) or local (in-process mutex: oversells with 2 replicas)", lower(func(c *Config) *string { return (*string)(&c.Lock) })},
	{"LOCK_TTL", "lock-ttl", "lock lease", duration(func(c *Config) *time.Duration { return &c.LockTTL })},
	{"LOCK_WAIT", "lock-wait", "longest wait for a lock before 503 busy", duration(func(c *Config) *time.Duration { return &c.LockWait })},
	{"LOCK_RENEW", "lock-renew", "renew leases in the background", boolean(func(c *Config) *bool { return &c.LockRenew })},
	{"BATCH_MAX", "batch-max", "most purchases of one product served per lock hold (group commit); 1 serves them one at a time", integer(func(c *Config) *int { return &c.BatchMax })},
	{"QUEUE_MAX", "queue-max", "most purchases of one product waiting in this replica; more get 503 busy at once", integer(func(c *Config) *int { return &c.QueueMax })},
	{"PAY_WINDOW", "pay-window", "payment window of a purchase (every design but redis-counter-async): its order stays pending and its unit reserved until paid or cancelled within it, else it expires and the unit goes back on sale; 0: orders are final at once", duration(func(c *Config) *time.Duration { return &c.PayWindow })},
	{"EXPIRE_INTERVAL", "expire-interval", "with a payment window: how often each replica expires due reservations; 0: a tenth of the window, 50ms to 1s", duration(func(c *Config) *time.Duration { return &c.ExpireInterval })},
	{"IDEMPOTENCY_TTL", "idempotency-ttl", "how long an Idempotency-Key is kept from its first use: a retry with it within this time gets the first answer; at least -pay-window", duration(func(c *Config) *time.Duration { return &c.IdempotencyTTL })},
	{"CHAOS_PAUSE", "chaos-pause", "fault injection: lock holders sleep this long between their checks and their writes", duration(func(c *Config) *time.Duration { return &c.ChaosPause })},
	{"CHAOS_PROB", "chaos-prob", "fault injection: `probability` (0..1) of the chaos pause", float(func(c *Config) *float64 { return &c.ChaosProb })},
	{"CHAOS_EXPIRY_PAUSE", "chaos-expiry-pause", "fault injection: expiries sleep this long inside their critical section, before their write (redis-counter: cancels and expiries, between the database's move and the counter's give-back)", duration(func(c *Config) *time.Duration { return &c.ChaosExpiryPause })},
	{"UNSAFE_NO_FENCE", "unsafe-no-fence", "UNSAFE, for demonstrations: turn fencing off in redis mode, so a holder whose lease ran out can oversell", boolean(func(c *Config) *bool { return &c.UnsafeNoFence })},
	{"UNSAFE_COUNTER_TOKENS", "", "", boolean(func(c *Config) *bool { return &c.UnsafeCounterTokens })},
	{"UNSAFE_EXPIRY", "unsafe-expiry", "UNSAFE, for demonstrations: `unlocked` (units go back outside the lock and the fence) or `unchecked` (due orders expire whatever their state)", lower(func(c *Config) *string { return &c.UnsafeExpiry })},
	{"UNSAFE_PAY_LATE", "unsafe-pay-late", "UNSAFE, for demonstrations: accept a payment after its window, also of an expired order", boolean(func(c *Config) *bool { return &c.UnsafePayLate })},
	{"LOG_LEVEL", "log-level", "log `level`: debug, info, warn or error", level(func(c *Config) *slog.Level { return &c.LogLevel })},
	{"SHUTDOWN_TIMEOUT", "shutdown-timeout", "how long shutdown waits for in-flight requests", duration(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{"READ_TIMEOUT", "read-timeout", "longest read of a whole request, body included", duration(func(c *Config) *time.Duration { return &c.ReadTimeout })},
	{"WRITE_TIMEOUT", "write-timeout", "longest time from a request's headers to the end of its response; longer than -lock-wait; 0 derives it: read timeout + lock wait + chaos pause + 5s", duration(func(c *Config) *time.Duration { return &c.WriteTimeout })},
	{"IDLE_TIMEOUT", "idle-timeout", "close keep-alive connections idle this long", duration(func(c *Config) *time.Duration { return &c.IdleTimeout })},
}

// setting is one row of settings.
type setting struct {
	env, flag, usage string
	field            func(*Config) flag.Value // the Config field, as text
}

// The kinds of field, each a flag.Value over a pointer into a Config. A
// nil pointer (the flag package makes one to tell a default) reads as "".

func str(f func(*Config) *string) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*stringValue)(f(c)) }
}

func lower(f func(*Config) *string) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*lowerValue)(f(c)) }
}

func list(f func(*Config) *[]string) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*listValue)(f(c)) }
}

func duration(f func(*Config) *time.Duration) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*durationValue)(f(c)) }
}

func boolean(f func(*Config) *bool) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*boolValue)(f(c)) }
}

func integer(f func(*Config) *int) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*decimal)(f(c)) }
}

func float(f func(*Config) *float64) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*floatValue)(f(c)) }
}

func level(f func(*Config) *slog.Level) func(*Config) flag.Value {
	return func(c *Config) flag.Value { return (*levelValue)(f(c)) }
}

type stringValue string

func (v *stringValue) String() string {
	if v == nil {
		return ""
	}
	return string(*v)
}
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

// lowerValue is a name read case-insensitively (a design, a lock mode).
type lowerValue string

func (v *lowerValue) String() string     { return (*stringValue)(v).String() }
func (v *lowerValue) Set(s string) error { *v = lowerValue(strings.ToLower(s)); return nil }

// listValue is a comma-separated list; blanks around items are dropped.
type listValue []string

func (v *listValue) String() string {
	if v == nil {
		return ""
	}
	return strings.Join(*v, ",")
}
func (v *listValue) Set(s string) error { *v = commaList(s); return nil }

type durationValue time.Duration

func (v *durationValue) String() string {
	if v == nil {
		return ""
	}
	return time.Duration(*v).String()
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	*v = durationValue(d)
	return err
}

type boolValue bool

func (v *boolValue) String() string {
	if v == nil {
		return ""
	}
	return strconv.FormatBool(bool(*v))
}

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*v = boolValue(b)
	return numErr(err)
}

func (v *boolValue) IsBoolFlag() bool { return true }

// decimal is an int read in base 10 only: flag.IntVar would read "010" as
// octal 8 and "0x10" as 16.
type decimal int

func (v *decimal) String() string {
	if v == nil {
		return ""
	}
	return strconv.Itoa(int(*v))
}

func (v *decimal) Set(s string) error {
	n, err := strconv.Atoi(s)
	*v = decimal(n)
	return numErr(err)
}

type floatValue float64

func (v *floatValue) String() string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(float64(*v), 'g', -1, 64)
}

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	*v = floatValue(f)
	return numErr(err)
}

type levelValue slog.Level

func (v *levelValue) String() string {
	if v == nil {
		return ""
	}
	return slog.Level(*v).String()
}

func (v *levelValue) Set(s string) error {
	if err := (*slog.Level)(v).UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return nil
}

// numErr keeps "invalid syntax" of a strconv error rather than the whole
// call, which repeats the value.
func numErr(err error) error {
	var num *strconv.NumError
	if errors.As(err, &num) {
		return num.Err
	}
	return err
}

// readEnv sets every setting whose variable getenv gives, and returns
// every error, so that one run reports them all. An empty variable is
// unset: the default stays.
func readEnv(cfg *Config, getenv func(string) string) error {
	var errs []error
	for _, s := range settings {
		if v := getenv(s.env); v != "" {
			if err := s.field(cfg).Set(v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", s.env, v, err))
			}
		}
	}
	return errors.Join(errs...)
}

// flagSet is the flags of the settings that have one, over cfg.
func flagSet(name string, cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	for _, s := range settings {
		if s.flag != "" {
			fs.Var(s.field(cfg), s.flag, s.usage+" (env "+s.env+")")
		}
	}
	return fs
}
