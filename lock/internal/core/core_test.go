package core

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// Every script that issues a token carries token.lua as it is: a reader of
// one script reads all of what Redis runs. A copy left behind by an edit
// of token.lua fails here (go generate ./lock/... brings it in step).
func TestScriptsCarryTheTokenRule(t *testing.T) {
	for _, name := range []string{"acquire.lua"} {
		src, err := os.ReadFile(filepath.Join("lua", name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := Splice(string(src), "token.lua", TokenLua)
		if err != nil || want != string(src) {
			t.Errorf("lua/%s does not carry lua/token.lua as it is (%v): run go generate ./lock/...", name, err)
		}
	}
}

// The pattern, step by step, on a real server: an acquire takes a free lock
// under a fresh owner with a token, and is refused a held one; only the
// owner extends or releases it; an extend never brings back a lock that is
// gone; an owner abandoned before its acquire arrives never takes the
// lock.
func TestThePattern(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := New(srv.Client(), Config{TTL: time.Minute, FenceTTL: time.Hour})
	k := NewKeys("lock:", "res")

	a, err := c.Acquire(ctx, k)
	if err != nil || a.Owner == "" || a.Token <= 0 {
		t.Fatalf("Acquire of a free lock: %+v, %v; want an owner and a token", a, err)
	}
	b, err := c.Acquire(ctx, k)
	if err != nil || b.Owner != "" || b.HeldFor <= 0 || b.HeldFor > time.Minute {
		t.Fatalf("Acquire of a held lock: %+v, %v; want refused, with the holder's remaining lease", b, err)
	}
	if _, ok, err := c.Extend(ctx, k, "someone-else"); ok || err != nil {
		t.Errorf("Extend by another owner: ok %v, %v; want refused", ok, err)
	}
	if ok, err := c.Release(ctx, k, "someone-else"); ok || err != nil {
		t.Errorf("Release by another owner: ok %v, %v; want refused", ok, err)
	}
	if _, ok, err := c.Extend(ctx, k, a.Owner); !ok || err != nil {
		t.Errorf("Extend by the owner: ok %v, %v; want done", ok, err)
	}
	if ok, err := c.Release(ctx, k, a.Owner); !ok || err != nil {
		t.Errorf("Release by the owner: ok %v, %v; want done", ok, err)
	}
	if _, ok, _ := c.Extend(ctx, k, a.Owner); ok || srv.Client().Exists(ctx, k.Lock).Val() != 0 {
		t.Error("Extend after the release brought the lock back")
	}
	again, err := c.Acquire(ctx, k)
	if err != nil || again.Token <= a.Token {
		t.Fatalf("the next acquisition: %+v, %v; want a token above %d", again, err, a.Token)
	}
	if ok, _ := c.Release(ctx, k, again.Owner); !ok {
		t.Fatal("release of the next acquisition failed")
	}

	// An abandoned owner: its acquire, arriving after the abandon, fails.
	c.abandonAll(ctx, []Keys{k}, []string{"late-owner"})
	late, err := c.AcquireAs(ctx, k, "late-owner")
	if err != nil || late.Owner != "" || srv.Client().Exists(ctx, k.Lock).Val() != 0 {
		t.Errorf("a late acquire of an abandoned owner: %+v, %v; want refused, and no lock", late, err)
	}
}
