package app_test

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := app.ParseConfig("serve", nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := app.DefaultConfig()
	if cfg.Addr != ":8080" || cfg.RedisAddr != "localhost:6379" || cfg.Database != "seckill.db" ||
		cfg.Lock != app.LockRedis || cfg.LockTTL != 10*time.Second || cfg.LockWait != 2*time.Second ||
		!cfg.LockRenew || cfg.UnsafeNoFence || cfg.UnsafeCounterTokens || cfg.ChaosPause != 0 || cfg.ChaosProb != 1 ||
		cfg.LogLevel != slog.LevelInfo || cfg.AdminToken != "" || cfg.ShutdownTimeout != want.ShutdownTimeout ||
		cfg.IdempotencyTTL != 24*time.Hour {
		t.Errorf("got %+v, want the documented defaults", cfg)
	}
}

func TestParseConfigEnvAndFlags(t *testing.T) {
	env := envOf(map[string]string{
		"ADDR": ":9000", "REDIS_ADDR": "r:1", "DATABASE": "env.db", "ADMIN_TOKEN": "envtok",
		"LOCK": "local", "LOCK_TTL": "3s", "LOCK_WAIT": "1s", "LOCK_RENEW": "false",
		"UNSAFE_NO_FENCE": "true", "UNSAFE_COUNTER_TOKENS": "true", "CHAOS_PAUSE": "50ms", "CHAOS_PROB": "0.25", "LOG_LEVEL": "debug",
	})
	cfg, err := app.ParseConfig("serve", []string{"-addr", ":9001", "-lock", "none", "-lock-ttl", "4s", "-lock-renew=true"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != ":9001" || cfg.Lock != app.LockNone || cfg.LockTTL != 4*time.Second || !cfg.LockRenew {
		t.Errorf("flags did not override the environment: %+v", cfg)
	}
	if cfg.RedisAddr != "r:1" || cfg.Database != "env.db" || cfg.AdminToken != "envtok" || cfg.LockWait != time.Second ||
		!cfg.UnsafeNoFence || !cfg.UnsafeCounterTokens || cfg.ChaosPause != 50*time.Millisecond || cfg.ChaosProb != 0.25 || cfg.LogLevel != slog.LevelDebug {
		t.Errorf("environment not applied: %+v", cfg)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string // in the error
	}{
		{map[string]string{"LOCK_TTL": "soon"}, nil, "LOCK_TTL"},
		{map[string]string{"LOCK_RENEW": "maybe"}, nil, "LOCK_RENEW"},
		{map[string]string{"UNSAFE_COUNTER_TOKENS": "maybe"}, nil, "UNSAFE_COUNTER_TOKENS"},
		{map[string]string{"CHAOS_PROB": "x"}, nil, "CHAOS_PROB"},
		{map[string]string{"LOCK": "zookeeper"}, nil, "zookeeper"},
		{nil, []string{"-lock", "etcd"}, "etcd"},
		{nil, []string{"-chaos-prob", "1.5"}, "probability"},
		{nil, []string{"-lock-ttl", "1ms"}, "TTL"},
		{nil, []string{"-lock-wait", "0s"}, "wait"},
		{nil, []string{"-log-level", "loud"}, "log level"},
		{nil, []string{"-nope"}, "nope"},
		{nil, []string{"extra"}, "extra"},
		{map[string]string{"DATABASE": "postgres://shop:s3cret@db:x/shop"}, nil, "port"},
		{nil, []string{"-database", "postgresql://shop:s3cret@[db/shop"}, "malformed"},
		{nil, []string{"-database", "mysql://shop:s3cret@db/shop"}, "postgres://"},
		{nil, []string{"-database", ""}, "database path"},
		{nil, []string{"-idempotency-ttl", "0s"}, "idempotency TTL"},
		{nil, []string{"-idempotency-ttl", "10m", "-pay-window", "15m"}, "at least the pay window"},
	} {
		_, err := app.ParseConfig("serve", tt.args, envOf(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("env %v args %v: got %v, want an error mentioning %q", tt.env, tt.args, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("env %v args %v: error %q shows the password", tt.env, tt.args, err)
		}
	}
	if _, err := app.ParseConfig("serve", []string{"-h"}, envOf(nil), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp", err)
	}
}

func TestParseConfigRedisAddrs(t *testing.T) {
	cfg, err := app.ParseConfig("serve", nil, envOf(map[string]string{"REDIS_ADDRS": "a:1, b:2,c:3"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a:1", "b:2", "c:3"}; !slices.Equal(cfg.RedisAddrs, want) {
		t.Errorf("RedisAddrs = %q, want %q", cfg.RedisAddrs, want)
	}
	cfg, err = app.ParseConfig("serve", []string{"-redis-addrs", "x:1,y:2,z:3,w:4,v:5"}, envOf(nil), io.Discard)
	if err != nil || len(cfg.RedisAddrs) != 5 {
		t.Errorf("-redis-addrs: %q, %v", cfg.RedisAddrs, err)
	}
	if _, err := app.ParseConfig("serve", []string{"-redis-addrs", "a:1,b:2"}, envOf(nil), io.Discard); err == nil {
		t.Error("two Redlock masters accepted; want an error (at least 3)")
	}
}

// Environ is what a replica started in a process of its own reads: every
// setting must come back as it was, defaults and changed ones alike.
func TestEnvironRoundTrips(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"defaults": nil,
		"changed": {
			"ADDR": "127.0.0.1:9000", "REDIS_ADDR": "r:1", "LOCK_WAIT_REPLICAS": "1",
			"DATABASE": "env.db", "ADMIN_TOKEN": "tok", "LOCK": "local", "LOCK_TTL": "3s",
			"LOCK_WAIT": "1500ms", "LOCK_RENEW": "false", "BATCH_MAX": "7", "QUEUE_MAX": "9",
			"UNSAFE_NO_FENCE": "true", "UNSAFE_COUNTER_TOKENS": "true", "CHAOS_PAUSE": "50ms",
			"CHAOS_PROB": "0.25", "LOG_LEVEL": "warn", "SHUTDOWN_TIMEOUT": "1m",
			"READ_TIMEOUT": "3s", "WRITE_TIMEOUT": "9s", "IDLE_TIMEOUT": "4s",
			"PAY_WINDOW": "15m", "IDEMPOTENCY_TTL": "15m",
		},
		"redlock": {"REDIS_ADDRS": "a:1,b:2,c:3", "REDIS_PASSWORD": "pw", "REDLOCK_NODE_TIMEOUT": "250ms"},
		"sentinel": {
			"REDIS_SENTINEL_MASTER": "m", "REDIS_SENTINEL_ADDRS": "s:1,s:2",
			"REDIS_SENTINEL_PASSWORD": "spw",
		},
		"url":     {"REDIS_URL": "redis://u:p@h:1/2"},
		"design":  {"DESIGN": "redis-counter-async", "ORDER_CLAIM_IDLE": "3s"},
		"cluster": {"REDIS_CLUSTER_ADDRS": "c:1,c:2,c:3"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := app.ParseConfig("serve", nil, envOf(env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			back := map[string]string{}
			for _, kv := range cfg.Environ() {
				k, v, _ := strings.Cut(kv, "=")
				back[k] = v
			}
			again, err := app.ParseConfig("serve", nil, envOf(back), io.Discard)
			if err != nil {
				t.Fatalf("ParseConfig of Environ %v: %v", back, err)
			}
			if !reflect.DeepEqual(again, cfg) {
				t.Errorf("round trip through %v:\n got %+v\nwant %+v", back, again, cfg)
			}
		})
	}
}
