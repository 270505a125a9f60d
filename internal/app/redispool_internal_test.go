package app

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// A replica's Redis client keeps up to redisPoolSize connections, not
// go-redis's 10 per CPU, unless REDIS_URL's pool_size says otherwise.
func TestRedisPoolSize(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want int
	}{
		{"REDIS_ADDR", func(c *Config) { c.RedisAddr = r.Addr() }, redisPoolSize},
		{"REDIS_URL", func(c *Config) { c.RedisURL = "redis://" + r.Addr() }, redisPoolSize},
		{"REDIS_URL with pool_size", func(c *Config) { c.RedisURL = "redis://" + r.Addr() + "?pool_size=7" }, 7},
	} {
		cfg := DefaultConfig()
		cfg.Addr = "127.0.0.1:0"
		cfg.Database = filepath.Join(t.TempDir(), "seckill.db")
		cfg.AdminToken = "test-admin-token"
		cfg.RedisAddr = ""
		tc.edit(&cfg)
		srv, err := NewServer(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("%s: NewServer: %v", tc.name, err)
		}
		got := srv.redis[0].(*redis.Client).Options().PoolSize
		_ = srv.Close()
		if got != tc.want {
			t.Errorf("%s: pool size %d, want %d", tc.name, got, tc.want)
		}
	}
}
