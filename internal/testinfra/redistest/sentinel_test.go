package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// The deployment fails over when its master is killed: every sentinel
// then names the replica, and the old master rejoins as its replica.
func TestSentinelFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Sentinel failover")
	}
	s := redistest.StartSentinel(t, "m", redistest.SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got := s.MasterAddrs(ctx); got[0] != s.Master.Addr() {
		t.Fatalf("sentinels name %v, want %s", got, s.Master.Addr())
	}
	if err := s.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.WaitMaster(ctx, s.Replica.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover took %v", time.Since(start))
	if err := s.Rejoin(ctx, s.Master, s.Replica.Addr()); err != nil {
		t.Fatal(err)
	}
}
