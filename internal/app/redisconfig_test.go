package app_test

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
)

func TestParseConfigRedisDeployments(t *testing.T) {
	t.Parallel()
	cfg, err := app.ParseConfig("serve", nil, envOf(map[string]string{
		"REDIS_SENTINEL_MASTER": "mymaster", "REDIS_SENTINEL_ADDRS": "s1:26379, s2:26379,,s3:26379",
		"REDIS_PASSWORD": "pw", "REDIS_SENTINEL_PASSWORD": "spw", "LOCK_WAIT_REPLICAS": "1",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RedisSentinelMaster != "mymaster" || !slices.Equal(cfg.RedisSentinelAddrs, []string{"s1:26379", "s2:26379", "s3:26379"}) ||
		cfg.RedisPassword != "pw" || cfg.RedisSentinelPassword != "spw" || cfg.LockWaitReplicas != 1 {
		t.Errorf("Sentinel from the environment: got %+v", cfg)
	}

	cfg, err = app.ParseConfig("serve", []string{"-redlock-node-timeout", "200ms"}, envOf(map[string]string{"REDIS_ADDRS": "a:1,b:1,c:1", "REDLOCK_NODE_TIMEOUT": "100ms"}), io.Discard)
	if err != nil || cfg.RedlockNodeTimeout != 200*time.Millisecond {
		t.Errorf("-redlock-node-timeout over REDLOCK_NODE_TIMEOUT: got %v, %v; want 200ms", cfg.RedlockNodeTimeout, err)
	}

	cfg, err = app.ParseConfig("serve", []string{"-redis-cluster-addrs", "n1:7000,n2:7001", "-redis-password", "pw"}, envOf(nil), io.Discard)
	if err != nil || !slices.Equal(cfg.RedisClusterAddrs, []string{"n1:7000", "n2:7001"}) || cfg.RedisPassword != "pw" {
		t.Errorf("Cluster from flags: got %q, %q, %v", cfg.RedisClusterAddrs, cfg.RedisPassword, err)
	}

	// REDIS_ADDR keeps its default beside REDIS_URL: only an explicit one
	// contradicts it.
	cfg, err = app.ParseConfig("serve", nil, envOf(map[string]string{"REDIS_URL": "rediss://u:pw@r:6380/2"}), io.Discard)
	if err != nil || cfg.RedisURL != "rediss://u:pw@r:6380/2" {
		t.Errorf("REDIS_URL: got %q, %v", cfg.RedisURL, err)
	}
	// A flag empties what the environment set.
	cfg, err = app.ParseConfig("serve", []string{"-redis-url", ""}, envOf(map[string]string{"REDIS_URL": "redis://r", "REDIS_ADDR": "r:1"}), io.Discard)
	if err != nil || cfg.RedisURL != "" || cfg.RedisAddr != "r:1" {
		t.Errorf("-redis-url \"\" over REDIS_URL: got %q, %q, %v", cfg.RedisURL, cfg.RedisAddr, err)
	}
}

// Contradictory or incomplete Redis settings are refused with a message
// that names them, and never shows a password.
func TestParseConfigRedisRefusals(t *testing.T) {
	t.Parallel()
	const pw = "hunter22"
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want []string // in the error
	}{
		{map[string]string{"REDIS_URL": "redis://r:1", "REDIS_ADDR": "r:2"}, nil, []string{"conflicting", "REDIS_ADDR", "REDIS_URL"}},
		{map[string]string{"REDIS_URL": "redis://r:1"}, []string{"-redis-addr", "localhost:6379"}, []string{"conflicting", "REDIS_ADDR", "REDIS_URL"}},
		{map[string]string{"REDIS_SENTINEL_MASTER": "m", "REDIS_SENTINEL_ADDRS": "s:1", "REDIS_CLUSTER_ADDRS": "c:1"}, nil, []string{"REDIS_SENTINEL_*", "REDIS_CLUSTER_ADDRS"}},
		{map[string]string{"REDIS_ADDRS": "a:1,b:1,c:1", "REDIS_URL": "redis://r"}, nil, []string{"REDIS_URL", "REDIS_ADDRS"}},
		{map[string]string{"REDIS_ADDRS": "a:1,b:1,c:1", "REDIS_ADDR": "r:1"}, nil, []string{"REDIS_ADDR,", "REDIS_ADDRS"}},
		{map[string]string{"REDIS_SENTINEL_MASTER": "m"}, nil, []string{"REDIS_SENTINEL_ADDRS", "set both"}},
		{map[string]string{"REDIS_SENTINEL_ADDRS": "s:1"}, nil, []string{"REDIS_SENTINEL_MASTER", "set both"}},
		{map[string]string{"REDIS_SENTINEL_PASSWORD": pw}, nil, []string{"REDIS_SENTINEL_PASSWORD"}},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@r:1", "REDIS_PASSWORD": pw}, nil, []string{"REDIS_URL", "REDIS_PASSWORD", "xxxxx"}},
		{map[string]string{"REDIS_URL": "redis://:" + pw + "@r:port"}, nil, []string{"REDIS_URL", "redis://:xxxxx@r:port", "invalid port"}},
		{map[string]string{"REDIS_URL": "http://:" + pw + "@r:1"}, nil, []string{"REDIS_URL", "scheme"}},
		{map[string]string{"REDIS_URL": "redis://" + pw + "@r:1/2/3"}, nil, []string{"REDIS_URL", "redis://xxxxx@r:1/2/3"}},
		{map[string]string{"LOCK_WAIT_REPLICAS": "1", "REDIS_CLUSTER_ADDRS": "c:1"}, nil, []string{"LOCK_WAIT_REPLICAS", "REDIS_CLUSTER_ADDRS"}},
		{map[string]string{"LOCK_WAIT_REPLICAS": "1", "REDIS_ADDRS": "a:1,b:1,c:1"}, nil, []string{"LOCK_WAIT_REPLICAS", "Redlock"}},
		{map[string]string{"LOCK_WAIT_REPLICAS": "-1"}, nil, []string{"LOCK_WAIT_REPLICAS", "negative"}},
		{map[string]string{"LOCK_WAIT_REPLICAS": "one"}, nil, []string{"LOCK_WAIT_REPLICAS"}},
		{map[string]string{"REDLOCK_NODE_TIMEOUT": "-1ms", "REDIS_ADDRS": "a:1,b:1,c:1"}, nil, []string{"REDLOCK_NODE_TIMEOUT", "negative"}},
		{map[string]string{"REDLOCK_NODE_TIMEOUT": "100ms"}, nil, []string{"REDLOCK_NODE_TIMEOUT", "REDIS_ADDRS"}},
		{map[string]string{"REDIS_ADDRS": "a:1,b:1,c:1", "LOCK_TTL": "1s"}, []string{"-redlock-node-timeout", "600ms"}, []string{"REDLOCK_NODE_TIMEOUT", "half the lock TTL"}},
	} {
		_, err := app.ParseConfig("serve", tt.args, envOf(tt.env), io.Discard)
		if err == nil {
			t.Errorf("env %v args %v: got nil, want an error", tt.env, tt.args)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("env %v args %v: error %q does not mention %q", tt.env, tt.args, err, w)
			}
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("env %v: error %q shows the password", tt.env, err)
		}
		if n := strings.Count(err.Error(), "\n"); n > 0 {
			t.Errorf("env %v: error %q has %d line breaks, want one line", tt.env, err, n)
		}
	}
}
