package fakeclock_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/fakeclock"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

func newClock(t *testing.T) *fakeclock.Clock {
	t.Helper()
	c, err := fakeclock.New()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// serverTime is the server's TIME.
func serverTime(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	tm, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func expiredKeys(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(t.Context(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "expired_keys:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatal("INFO stats has no expired_keys")
	return 0
}

// A redis-server's key expiry follows the clock of the preload: its
// expiry times are absolute times on the wall clock (the time of SET plus
// PX), so a clock stepped forward past them expires the keys at once:
// lazily, on the first access, and in the active expiry cycle (10 times a
// second), without any access. A key set while the clock is ahead expires
// that much later once it is stepped back. The control, a server started
// without the preload, keeps its key through the same Jump.
func TestRedisExpiryFollowsTheClock(t *testing.T) {
	clock := newClock(t)
	faked := redistest.StartEnv(t, clock.Env()).Client()
	plain := redistest.Start(t).Client()
	ctx := t.Context()
	const px = time.Minute
	const jump = 2 * time.Minute

	before := serverTime(t, faked)
	if d := time.Since(before); d < -time.Hour || d > time.Hour {
		t.Fatalf("the faked server's TIME is %v, %v from ours before any jump; want the same clock", before, d)
	}
	for _, c := range []*redis.Client{faked, plain} {
		if err := c.Set(ctx, "lazy", "v", px).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			if err := c.Set(ctx, fmt.Sprintf("active:%d", i), "v", px).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	expiredBefore := expiredKeys(t, faked)

	clock.Jump(jump)
	jumpedAt := time.Now()
	after := serverTime(t, faked)
	if moved := after.Sub(before); moved < jump {
		t.Fatalf("TIME moved by %v across the jump, want at least %v", moved, jump)
	}
	if n, err := faked.Exists(ctx, "lazy").Result(); err != nil || n != 0 {
		t.Fatalf("after the jump, EXISTS lazy = %d, %v; want 0: the key's expiry did not follow the clock", n, err)
	}
	// The active cycle expires the others without anyone asking for them.
	poll.Eventually(t, 20*time.Second, "the active expiry cycle to expire the 100 keys", func() bool {
		return expiredKeys(t, faked) >= expiredBefore+101
	})
	activeTook := time.Since(jumpedAt)
	if n, err := plain.Exists(ctx, "lazy", "active:0", "active:99").Result(); err != nil || n != 3 {
		t.Fatalf("control without the preload: EXISTS = %d, %v; want 3: the jump must not reach it", n, err)
	}

	if err := faked.Set(ctx, "ahead", "v", px).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Jump(-jump)
	pttl, err := faked.PTTL(ctx, "ahead").Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl <= px {
		t.Errorf("a %v key set with the clock %v ahead, after stepping it back: PTTL %v, want more than %v", px, jump, pttl, px)
	}
	t.Logf("TIME moved by %v; the key (PX %v) was gone at its first access; the active cycle expired 100 more within %v; "+
		"a key set %v ahead has PTTL %v once the clock is back; the server without the preload kept its keys",
		after.Sub(before).Round(time.Millisecond), px, activeTook.Round(time.Millisecond), jump, pttl)
}
