package app_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/seckill-ref/seckill/internal/app"
)

// setting is one configuration setting: its flag and its variable.
type setting struct{ flag, env string }

// settings reads every setting from serve's own usage text, so that a new
// setting is fuzzed as soon as it has a flag that names its variable.
func settings(tb testing.TB) []setting {
	tb.Helper()
	var usage bytes.Buffer
	if _, err := app.ParseConfig("serve", []string{"-h"}, envOf(nil), &usage); !errors.Is(err, flag.ErrHelp) {
		tb.Fatalf("-h: %v", err)
	}
	var out []setting
	current := ""
	for _, line := range strings.Split(usage.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "  -"); ok {
			current, _, _ = strings.Cut(name, " ")
		}
		if _, env, ok := strings.Cut(line, "(env "); ok && current != "" {
			env, _, _ = strings.Cut(env, ")")
			out = append(out, setting{flag: current, env: env})
			current = ""
		}
	}
	if len(out) < 10 {
		tb.Fatalf("found %d settings in the usage text, want every one:\n%s", len(out), usage.String())
	}
	return out
}

// normalize lower-cases s and spells "lock-ttl", "LOCK_TTL" and "lock TTL"
// alike, so that an error can be matched to the setting it is about.
func normalize(s string) string {
	return strings.NewReplacer("-", " ", "_", " ").Replace(strings.ToLower(s))
}

// parseInput turns fuzz strings into an environment (lines KEY=VALUE) and
// arguments (one per line).
func parseInput(envText, argText string) (map[string]string, []string) {
	env := map[string]string{}
	for _, line := range strings.Split(envText, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	var args []string
	if argText != "" {
		args = strings.Split(argText, "\n")
	}
	return env, args
}

// FuzzParseConfig: whatever the environment and the arguments, ParseConfig
// does not panic, and it either returns a configuration that passes
// Validate (with a write timeout longer than every wait of a request) or
// an error each line of which names the setting, flag or argument it is
// about. -h alone is flag.ErrHelp. Parsing twice gives the same result.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range [][2]string{
		{"", ""},
		{"LOCK_TTL=3s\nLOCK_WAIT=1s", "-lock=none"},
		{"LOCK_TTL=soon", ""},
		{"", "-lock-ttl\n1ms"},
		{"WRITE_TIMEOUT=1s\nLOCK_WAIT=2s", ""},
		{"", "-write-timeout=3s\n-chaos-pause=2s"},
		{"READ_TIMEOUT=0", "-idle-timeout=-1s"},
		{"CHAOS_PROB=NaN", ""},
		{"", "-chaos-prob=1e309"},
		{"REDIS_ADDRS=a:1,b:2", ""},
		{"LOG_LEVEL=INFO+2", ""},
		{"LOCK=REDIS", "-unsafe-no-fence"},
		{"", "-h"},
		{"", "extra"},
		{"", "-nope"},
		{"", "--"},
		{"", "-addr"},
		{"DATABASE=", "-database="},
		{"LOCK_WAIT=-5s", "-lock-wait=9223372036s"},
		{"CHAOS_PAUSE=2562047h", "-lock-wait=2562047h"},
		{"REDIS_URL=redis://:pw@h:6379/1", "-redis-password=pw"},
		{"REDIS_URL=redis://%zz", ""},
		{"REDIS_ADDR=a:1\nREDIS_URL=redis://b:2", ""},
		{"REDIS_SENTINEL_MASTER=m", "-lock-wait-replicas=1"},
		{"REDIS_SENTINEL_ADDRS=s:26379,t:26379", "-redis-sentinel-master=m\n-redis-sentinel-password=x"},
		{"REDIS_CLUSTER_ADDRS=a:1,b:2", "-lock-wait-replicas=1"},
		{"REDIS_SENTINEL_PASSWORD=x", "-lock-wait-replicas=-1"},
		{"DESIGN=conditional\nLOCK=none", "-unsafe-no-fence"},
		{"DESIGN=REDIS-COUNTER", "-redis-addrs=a:1,b:2,c:3\n-order-claim-idle=-1s"},
	} {
		f.Add(seed[0], seed[1])
	}
	subjects := []string{"flag", "argument"}
	for _, s := range settings(f) {
		subjects = append(subjects, normalize(s.flag))
	}
	f.Fuzz(func(t *testing.T, envText, argText string) {
		env, args := parseInput(envText, argText)
		cfg, err := app.ParseConfig("serve", args, envOf(env), io.Discard)
		cfg2, err2 := app.ParseConfig("serve", args, envOf(env), io.Discard)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) || (err == nil && !reflect.DeepEqual(cfg, cfg2)) {
			t.Fatalf("env %q args %q: two parses differ: %v / %v", env, args, err, err2)
		}
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("env %q args %q: accepted, but Validate says %v", env, args, verr)
			}
			if cfg.HTTPWriteTimeout() <= cfg.RequestWait() {
				t.Fatalf("env %q args %q: write timeout %v not longer than a request's wait %v", env, args, cfg.HTTPWriteTimeout(), cfg.RequestWait())
			}
			return
		}
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		msg := err.Error()
		if strings.TrimSpace(msg) == "" {
			t.Fatalf("env %q args %q: an empty error", env, args)
		}
		for _, line := range strings.Split(msg, "\n") {
			found := false
			for _, s := range subjects {
				if strings.Contains(normalize(line), s) {
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("env %q args %q: error line %q names no setting (whole error: %q)", env, args, line, msg)
			}
		}
	})
}

// FuzzConfigEnvMatchesFlag: a value means the same as a variable and as a
// flag: both accepted with equal configurations, or both refused. (An
// empty variable means "unset", by design, so it is not compared.)
func FuzzConfigEnvMatchesFlag(f *testing.F) {
	all := settings(f)
	// Each value against the setting it was written for; the fuzzer tries
	// the others.
	for _, seed := range [][2]string{
		{"REDIS_ADDR", "r:2"}, {"REDIS_ADDRS", "a:1,b:2,c:3"}, {"DATABASE", "x.db"}, {"LOCK", "REDIS"},
		{"LOCK_TTL", "3s"}, {"LOCK_WAIT", "-1s"}, {"LOCK_RENEW", "t"}, {"UNSAFE_NO_FENCE", "0"},
		{"CHAOS_PAUSE", "2562047h"}, {"CHAOS_PROB", "0x1p-2"}, {"CHAOS_PROB", "NaN"}, {"LOG_LEVEL", "warn+1"},
		{"SHUTDOWN_TIMEOUT", " 1s"}, {"READ_TIMEOUT", "1ms"}, {"WRITE_TIMEOUT", "2s"}, {"IDLE_TIMEOUT", "5s"},
		{"QUEUE_MAX", "010"}, {"BATCH_MAX", "0x10"},
		{"REDIS_URL", "redis://u:pw@h:1/2"}, {"REDIS_SENTINEL_MASTER", "m"}, {"REDIS_SENTINEL_ADDRS", "s:1, t:2"},
		{"REDIS_CLUSTER_ADDRS", "a:1,,b:2"}, {"REDIS_PASSWORD", "pw"}, {"REDIS_SENTINEL_PASSWORD", "pw"},
		{"LOCK_WAIT_REPLICAS", "010"}, {"LOCK_WAIT_REPLICAS", "0x1"},
		{"DESIGN", "Redis-Counter"}, {"ORDER_CLAIM_IDLE", "1s"},
	} {
		for i, s := range all {
			if s.env == seed[0] {
				f.Add(uint8(i), seed[1])
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		if value == "" {
			return
		}
		s := all[int(which)%len(all)]
		viaEnv, envErr := app.ParseConfig("serve", nil, envOf(map[string]string{s.env: value}), io.Discard)
		viaFlag, flagErr := app.ParseConfig("serve", []string{"-" + s.flag + "=" + value}, envOf(nil), io.Discard)
		if (envErr == nil) != (flagErr == nil) {
			t.Fatalf("%s=%q: %v; -%s=%q: %v", s.env, value, envErr, s.flag, value, flagErr)
		}
		if envErr == nil && !reflect.DeepEqual(viaEnv, viaFlag) {
			t.Fatalf("%s=%q gives %+v\n-%s=%q gives %+v", s.env, value, viaEnv, s.flag, value, viaFlag)
		}
	})
}
