package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis deployments the lock can run on, besides Redlock's independent
// masters (REDIS_ADDRS), which server.go's newRedlock connects to:
//
//   - one server by address (REDIS_ADDR, the default);
//   - one server by URL (REDIS_URL): password, TLS (rediss://), db number;
//   - a master with replicas behind Redis Sentinel (REDIS_SENTINEL_MASTER
//     and REDIS_SENTINEL_ADDRS): the client asks the sentinels where the
//     master is, and follows it through a failover;
//   - Redis Cluster (REDIS_CLUSTER_ADDRS): every key of a lock carries the
//     same hash tag (package lock), so each script runs in one slot.
//
// Each is checked at start-up within redisDialTimeout, with an error of one
// line that names the setting and never shows a password.

// redisKinds lists the Redis settings that are set, by their variables;
// more than one is a contradiction. REDIS_ADDR counts only when given
// explicitly: it has a default, and programs that fill a Config in (the
// demo, tests) may leave it beside another kind, which then wins.
func (c Config) redisKinds() []string {
	var kinds []string
	if c.redisAddrSet {
		kinds = append(kinds, "REDIS_ADDR")
	}
	if c.RedisURL != "" {
		kinds = append(kinds, "REDIS_URL")
	}
	if c.RedisSentinelMaster != "" || len(c.RedisSentinelAddrs) > 0 {
		kinds = append(kinds, "REDIS_SENTINEL_*")
	}
	if len(c.RedisClusterAddrs) > 0 {
		kinds = append(kinds, "REDIS_CLUSTER_ADDRS")
	}
	if len(c.RedisAddrs) > 0 {
		kinds = append(kinds, "REDIS_ADDRS")
	}
	return kinds
}

// validateRedis refuses contradictory or incomplete Redis settings, each
// with one line that says what to change.
func (c Config) validateRedis() []error {
	var errs []error
	if kinds := c.redisKinds(); len(kinds) > 1 {
		errs = append(errs, fmt.Errorf("conflicting Redis settings: %s set together; set only one of REDIS_ADDR (one server), REDIS_URL, REDIS_SENTINEL_MASTER with REDIS_SENTINEL_ADDRS, REDIS_CLUSTER_ADDRS, REDIS_ADDRS (Redlock)",
			strings.Join(kinds, ", ")))
	}
	if c.RedisURL != "" {
		if opts, err := redis.ParseURL(c.RedisURL); err != nil {
			errs = append(errs, urlError(c.RedisURL, err))
		} else if opts.Password != "" && c.RedisPassword != "" {
			errs = append(errs, fmt.Errorf("REDIS_URL %s carries a password and REDIS_PASSWORD is set too: keep one", maskURL(c.RedisURL)))
		}
	}
	if c.UsesRedis() && c.RedisAddr == "" && c.RedisURL == "" && c.RedisSentinelMaster == "" &&
		len(c.RedisSentinelAddrs) == 0 && len(c.RedisClusterAddrs) == 0 && len(c.RedisAddrs) == 0 {
		what := "the lock"
		if c.Design != DesignLock {
			what = "the stock counters"
		}
		errs = append(errs, errors.New("no Redis for "+what+": set REDIS_ADDR, REDIS_URL, REDIS_SENTINEL_MASTER with REDIS_SENTINEL_ADDRS, REDIS_CLUSTER_ADDRS or REDIS_ADDRS"))
	}
	if (c.RedisSentinelMaster == "") != (len(c.RedisSentinelAddrs) == 0) {
		errs = append(errs, errors.New("REDIS_SENTINEL_MASTER (the master's name) and REDIS_SENTINEL_ADDRS (the sentinels) go together: set both"))
	}
	if c.RedisSentinelPassword != "" && c.RedisSentinelMaster == "" {
		errs = append(errs, errors.New("REDIS_SENTINEL_PASSWORD is set without REDIS_SENTINEL_MASTER: it is the sentinels' password"))
	}
	switch {
	case c.RedlockNodeTimeout < 0:
		errs = append(errs, fmt.Errorf("REDLOCK_NODE_TIMEOUT %v: must not be negative (0 keeps the lock's default)", c.RedlockNodeTimeout))
	case c.RedlockNodeTimeout > 0 && len(c.RedisAddrs) == 0:
		errs = append(errs, errors.New("REDLOCK_NODE_TIMEOUT is for a Redlock (REDIS_ADDRS), whose nodes are asked in parallel"))
	case c.RedlockNodeTimeout > 0 && c.RedlockNodeTimeout*2 > c.LockTTL:
		errs = append(errs, fmt.Errorf("REDLOCK_NODE_TIMEOUT %v: must be at most half the lock TTL (%v), whose lease it eats into", c.RedlockNodeTimeout, c.LockTTL))
	}
	switch {
	case c.LockWaitReplicas < 0:
		errs = append(errs, fmt.Errorf("LOCK_WAIT_REPLICAS %d: must not be negative", c.LockWaitReplicas))
	case c.LockWaitReplicas > 0 && len(c.RedisClusterAddrs) > 0:
		errs = append(errs, errors.New("LOCK_WAIT_REPLICAS is for a master with replicas (REDIS_ADDR, REDIS_URL, Sentinel), not for REDIS_CLUSTER_ADDRS"))
	case c.LockWaitReplicas > 0 && len(c.RedisAddrs) > 0:
		errs = append(errs, errors.New("LOCK_WAIT_REPLICAS is for a master with replicas (REDIS_ADDR, REDIS_URL, Sentinel), not for a Redlock (REDIS_ADDRS), whose masters are independent"))
	}
	return errs
}

// redisTarget says where the lock's Redis is, for the start-up log line:
// an address, the URL with its password masked, or the kind and its
// addresses.
func (c Config) redisTarget() string {
	switch {
	case len(c.RedisAddrs) > 0:
		return "redlock:" + strings.Join(c.RedisAddrs, ",")
	case c.RedisURL != "":
		return maskURL(c.RedisURL)
	case c.RedisSentinelMaster != "":
		return "sentinel:" + c.RedisSentinelMaster + "@" + strings.Join(c.RedisSentinelAddrs, ",")
	case len(c.RedisClusterAddrs) > 0:
		return "cluster:" + strings.Join(c.RedisClusterAddrs, ",")
	}
	return c.RedisAddr
}

// connectRedis builds the client of the configured deployment (not
// Redlock) and checks, within redisDialTimeout, that it answers. The
// client goes into s.redis at once, so that Close closes it whatever
// happens next.
func (s *Server) connectRedis(ctx context.Context) (redis.UniversalClient, error) {
	ctx, cancel := context.WithTimeout(ctx, redisDialTimeout)
	defer cancel()
	cfg := s.cfg
	switch {
	case cfg.RedisURL != "":
		return s.connectURL(ctx)
	case cfg.RedisSentinelMaster != "":
		return s.connectSentinel(ctx)
	case len(cfg.RedisClusterAddrs) > 0:
		return s.connectCluster(ctx)
	}
	if err := dialCheck(ctx, cfg.RedisAddr); err != nil {
		return nil, redisUnreachable(cfg.RedisAddr, err)
	}
	client := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, Password: cfg.RedisPassword, PoolSize: redisPoolSize})
	s.redis = append(s.redis, client)
	if err := client.Ping(ctx).Err(); err != nil {
		// It answers, but not PONG: a password, most likely.
		return nil, fmt.Errorf("REDIS_ADDR %s: %w", cfg.RedisAddr, err)
	}
	return client, nil
}

func (s *Server) connectURL(ctx context.Context) (redis.UniversalClient, error) {
	raw := s.cfg.RedisURL
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, urlError(raw, err)
	}
	if opts.Password == "" {
		opts.Password = s.cfg.RedisPassword
	}
	if opts.Network == "tcp" {
		if err := dialCheck(ctx, opts.Addr); err != nil {
			return nil, fmt.Errorf("REDIS_URL %s: cannot reach Redis: %s", maskURL(raw), scrub(err.Error(), raw))
		}
	}
	if opts.PoolSize == 0 { // the URL's pool_size, when it has one
		opts.PoolSize = redisPoolSize
	}
	client := redis.NewClient(opts)
	s.redis = append(s.redis, client)
	if err := ping(ctx, client); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v", redisDialTimeout)
			if opts.TLSConfig != nil {
				err = fmt.Errorf("%w (rediss:// needs a server that speaks TLS on that port)", err)
			}
		}
		return nil, fmt.Errorf("REDIS_URL %s: %s", maskURL(raw), scrub(err.Error(), raw))
	}
	return client, nil
}

// redisPoolSize is the most connections a replica keeps to a Redis server.
// Most requests make one Redis call each (a counter's take, a shared read's
// lock attempt), and a burst keeps about as many in flight per replica as
// it has connections to the replica: with go-redis's default pool (10 per
// CPU) they wait for a connection in the client, each wait a timer and a
// select, which cost redis-counter-async about a tenth of its rate in
// BenchmarkMinimalForms. Redis serves thousands of connections.
const redisPoolSize = 128

// connectSentinel asks every sentinel for the master first: the failover
// client would report a master name no sentinel knows, or sentinels that do
// not answer, as "all sentinels are unreachable", and only after retries.
func (s *Server) connectSentinel(ctx context.Context) (redis.UniversalClient, error) {
	cfg := s.cfg
	sentinels := strings.Join(cfg.RedisSentinelAddrs, ",")
	master, err := askSentinels(ctx, cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster, cfg.RedisSentinelPassword)
	if err != nil {
		return nil, fmt.Errorf("REDIS_SENTINEL_ADDRS %s: %w", sentinels, err)
	}
	if err := dialCheck(ctx, master); err != nil {
		return nil, fmt.Errorf("REDIS_SENTINEL_MASTER %q: the sentinels at %s name %s, which does not answer: %w", cfg.RedisSentinelMaster, sentinels, master, err)
	}
	// A dead master's address often does not refuse a dial but drops it
	// (a host or container gone): with go-redis's defaults, 5 dials of up
	// to 5 s each, the purchases that wait on a dial begun just before the
	// switch stay busy for many seconds after the failover. One dial of at
	// most 500 ms, and calls that honour their contexts, let the next call
	// ask the sentinels again.
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            cfg.RedisSentinelMaster,
		SentinelAddrs:         cfg.RedisSentinelAddrs,
		SentinelPassword:      cfg.RedisSentinelPassword,
		Password:              cfg.RedisPassword,
		DialTimeout:           500 * time.Millisecond,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		PoolSize:              redisPoolSize,
	})
	s.redis = append(s.redis, client)
	if err := ping(ctx, client); err != nil {
		return nil, fmt.Errorf("REDIS_SENTINEL_MASTER %q at %s (named by the sentinels at %s): %w", cfg.RedisSentinelMaster, master, sentinels, err)
	}
	return client, nil
}

// askSentinels asks every sentinel at once where the master called name
// is, and returns the first answer. Its error says whether no sentinel
// answered, or those that did know no such master.
func askSentinels(ctx context.Context, addrs []string, name, password string) (string, error) {
	type answer struct {
		addr string
		err  error
	}
	answers := make([]answer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
			defer c.Close()
			hp, err := c.GetMasterAddrByName(ctx, name).Result()
			if err == nil && len(hp) != 2 {
				err = fmt.Errorf("unexpected reply %q", hp)
			}
			if err == nil {
				answers[i].addr = hp[0] + ":" + hp[1]
			}
			answers[i].err = err
		})
	}
	wg.Wait()
	var unknown int
	var errs []string
	for i, a := range answers {
		switch {
		case a.err == nil:
			return a.addr, nil
		case errors.Is(a.err, redis.Nil):
			unknown++
		default:
			errs = append(errs, addrs[i]+": "+a.err.Error())
		}
	}
	if unknown > 0 {
		return "", fmt.Errorf("no master named %q: %d of %d sentinels answered, and none knows it (check REDIS_SENTINEL_MASTER)", name, unknown, len(addrs))
	}
	return "", fmt.Errorf("no usable answer from the sentinels (%s)", strings.Join(errs, "; "))
}

func (s *Server) connectCluster(ctx context.Context) (redis.UniversalClient, error) {
	cfg := s.cfg
	nodes := "REDIS_CLUSTER_ADDRS " + strings.Join(cfg.RedisClusterAddrs, ",")
	var dialErr error
	for _, addr := range cfg.RedisClusterAddrs {
		if dialErr = dialCheck(ctx, addr); dialErr == nil {
			break
		}
	}
	if dialErr != nil {
		return nil, fmt.Errorf("%s: cannot reach any node: %w", nodes, dialErr)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisClusterAddrs, Password: cfg.RedisPassword, PoolSize: redisPoolSize})
	s.redis = append(s.redis, client)
	info, err := client.ClusterInfo(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nodes, err)
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return nil, fmt.Errorf("%s: cluster_state is not ok (are all 16384 slots served?)", nodes)
	}
	if err := ping(ctx, client); err != nil {
		return nil, fmt.Errorf("%s: %w", nodes, err)
	}
	return client, nil
}

// ping asks c whether it answers: every master of a cluster, since each
// holds the locks of its slots; the one server or master otherwise.
func ping(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := m.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", m.Options().Addr, err)
			}
			return nil
		})
	}
	return c.Ping(ctx).Err()
}

// warnFewReplicas logs a warning when the master has fewer replicas than
// LOCK_WAIT_REPLICAS asks for: every acquisition would then fail, and every
// purchase be busy, until enough replicas connect. It does not refuse to
// start: a replica may well be on its way.
func warnFewReplicas(ctx context.Context, c redis.UniversalClient, want int, log *slog.Logger) {
	if want <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, redisDialTimeout)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		log.Warn("LOCK_WAIT_REPLICAS: cannot count the master's replicas", "err", err)
		return
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			if n, err := strconv.Atoi(v); err == nil && n < want {
				log.Warn("LOCK_WAIT_REPLICAS: the master has fewer replicas than every acquisition waits for; purchases are busy until enough connect",
					"replicas", n, "lock_wait_replicas", want)
			}
			return
		}
	}
}

// maskURL returns raw with its password replaced by xxxxx: everything
// after the first ':' of the user information, or all of it when it has no
// ':' (redis://secret@host is a common slip). It does not need raw to
// parse: an unparsable URL is shown in errors, masked too.
func maskURL(raw string) string {
	start, at := userinfo(raw)
	if at < 0 {
		return raw
	}
	if user, _, ok := strings.Cut(raw[start:at], ":"); ok {
		return raw[:start] + user + ":xxxxx" + raw[at:]
	}
	return raw[:start] + "xxxxx" + raw[at:]
}

// userinfo locates the user information of a URL, raw[start:at]; at is -1
// when there is none.
func userinfo(raw string) (start, at int) {
	at = strings.LastIndex(raw, "@")
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return start, at
}

// scrub masks raw, and the password in it, wherever msg shows them:
// net/url's errors quote the URL they were given.
func scrub(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, maskURL(raw))
	start, at := userinfo(raw)
	if at < 0 {
		return msg
	}
	secret := raw[start:at]
	if _, pw, ok := strings.Cut(secret, ":"); ok {
		secret = pw
	}
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
	}
	return msg
}

// urlError is the one-line error of a REDIS_URL that does not parse.
func urlError(raw string, err error) error {
	return fmt.Errorf("REDIS_URL %s: %s (want redis://[user:password@]host:port[/db], or rediss:// for TLS)", maskURL(raw), scrub(err.Error(), raw))
}

// commaList splits a comma-separated list, dropping blanks.
func commaList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
