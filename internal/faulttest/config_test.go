package faulttest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/procutil"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// Bad Redis configuration: the real binary exits at start with status 1
// and one line on stderr that names the setting, never a panic, never a
// hang, never the password. (The package tests of internal/app check each
// message; this checks the process: its exit, its output, its time.)
func TestBadRedisConfigExitsWithOneLine(t *testing.T) {
	t.Parallel()
	const pw = "hunter22-pw"
	s := redistest.StartSentinel(t, "seckill", redistest.SentinelOptions{})
	down := redistest.Start(t)
	_ = down.Stop() // nothing listens on its port now
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string // in the line
	}{
		{"unparsable URL", map[string]string{"REDIS_URL": "redis://:" + pw + "@host:port"}, "REDIS_URL redis://:xxxxx@host:port"},
		{"unreachable URL", map[string]string{"REDIS_URL": "redis://:" + pw + "@" + down.Addr()}, "cannot reach Redis"},
		{"unreachable sentinels", map[string]string{"REDIS_SENTINEL_MASTER": "seckill", "REDIS_SENTINEL_ADDRS": down.Addr()}, "no usable answer from the sentinels"},
		{"unknown master", map[string]string{"REDIS_SENTINEL_MASTER": "nosuch", "REDIS_SENTINEL_ADDRS": strings.Join(s.Addrs(), ",")}, `no master named "nosuch"`},
		{"unreachable cluster", map[string]string{"REDIS_CLUSTER_ADDRS": down.Addr(), "REDIS_PASSWORD": pw}, "cannot reach any node"},
		{"contradiction", map[string]string{"REDIS_URL": "redis://" + s.Master.Addr(), "REDIS_ADDR": s.Master.Addr()}, "conflicting Redis settings"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := with(baseEnv(), "ADDR", "127.0.0.1:0", "DATABASE", filepath.Join(t.TempDir(), "seckill.db"))
			for k, v := range tt.env {
				env[k] = v
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, seckillBin, "serve")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			p, err := procutil.Start(cmd)
			if err == nil {
				err = p.Wait()
			}
			took := time.Since(start)
			var exit *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("got %v after %v, want exit status 1 before the 20s deadline; stderr:\n%s", err, took, stderr.String())
			}
			out := strings.TrimRight(stderr.String(), "\n")
			t.Logf("exit 1 after %v: %s", took.Round(time.Millisecond), out)
			if strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "seckill: ") || !strings.Contains(out, tt.want) {
				t.Errorf("stderr: got %q, want one line starting \"seckill: \" and mentioning %q", out, tt.want)
			}
			if all := stdout.String() + stderr.String(); strings.Contains(all, pw) || strings.Contains(all, "panic") {
				t.Errorf("output shows the password or a panic:\n%s", all)
			}
		})
	}
}
