package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
)

// The unsafe modes must visibly oversell: that is what they are for. The
// meet hook makes two holders read the same stock before either writes, so
// the oversell is certain. With 10 buyers for 5 items, a first pair that
// both read 5 and both write back 4 leaves 4 items after 2 sales; the
// remaining 8 buyers then take at least those 4: at least 6 sold.
func TestOversellWithoutDistributedLock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale")
	}
	for _, tt := range []struct {
		name     string
		mode     app.LockMode
		replicas int
	}{
		{"none, one replica", app.LockNone, 1},
		{"none, two replicas", app.LockNone, 2},
		{"local, two replicas", app.LockLocal, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			replicas := c.replicasMeeting(tt.replicas, tt.mode, meet(2, 10*time.Second))
			id := createProduct(t, replicas[0].Handler(), 5)
			statuses := rush(id, 10, replicas...)
			p := getProduct(t, replicas[0].Handler(), id)
			orders := allOrders(t, replicas[0].Handler(), id)
			t.Logf("statuses %v; %d sold, stock %d", statuses, p.Sold, p.Stock)
			if p.Sold <= 5 || len(orders) != int(p.Sold) || statuses[http.StatusCreated] != len(orders) {
				t.Errorf("got %d sold (%d orders, %d 201s), want more than the 5 in stock", p.Sold, len(orders), statuses[http.StatusCreated])
			}
		})
	}
}

// The same configuration with an exclusive lock, for contrast: the first
// holder waits out the hook's timeout alone, nobody else gets in meanwhile
// (or they would meet and oversell), and exactly the stock is sold. local with one replica is correct too: its mutex is
// exclusive within the process.
func TestNoOversellWithExclusiveLock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale")
	}
	for _, tt := range []struct {
		name     string
		mode     app.LockMode
		replicas int
	}{
		{"local, one replica", app.LockLocal, 1},
		{"redis, two replicas", app.LockRedis, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			replicas := c.replicasMeeting(tt.replicas, tt.mode, meet(2, 100*time.Millisecond))
			id := createProduct(t, replicas[0].Handler(), 5)
			statuses := rush(id, 10, replicas...)
			p := getProduct(t, replicas[0].Handler(), id)
			if p.Sold != 5 || p.Stock != 0 || statuses[http.StatusCreated] != 5 || statuses[http.StatusConflict] != 5 {
				t.Errorf("got %d sold, stock %d, statuses %v; want 5 sold, stock 0, five 201s and five 409s", p.Sold, p.Stock, statuses)
			}
		})
	}
}

// Lease expiry mid-purchase, as the chaos settings produce it: every holder
// pauses longer than its lease, with renewal off, so each holder's lease
// runs out and the next buyer is let in while it is still "working". With
// fencing, the late writes are refused: no oversell, and the late holders
// get 503.
func TestLeaseExpiryFenced(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale")
	}
	c := newCluster(t)
	edit := func(cfg *app.Config) {
		cfg.LockTTL = 300 * time.Millisecond
		cfg.LockRenew = false
		cfg.LockWait = time.Minute
		cfg.ChaosPause = time.Second
		cfg.ChaosProb = 1
	}
	a, b := c.replica(edit), c.replica(edit)
	id := createProduct(t, a.Handler(), 1)
	statuses := rush(id, 4, a, b)

	p := getProduct(t, a.Handler(), id)
	t.Logf("statuses %v; %d sold, stock %d", statuses, p.Sold, p.Stock)
	if p.Sold > 1 || p.Sold+p.Stock != 1 {
		t.Errorf("got %d sold and stock %d, want at most 1 sold and sold+stock = 1", p.Sold, p.Stock)
	}
	busy := statuses[http.StatusServiceUnavailable]
	if busy == 0 {
		t.Errorf("got no 503, want the late holders refused (statuses %v)", statuses)
	}
	rejected := a.Metrics().FenceRejections() + b.Metrics().FenceRejections()
	counted := a.Metrics().Purchases("fence_rejected") + b.Metrics().Purchases("fence_rejected")
	// One refused write fails its whole batch: each 503 is a refused
	// purchase, and there is at least one refused write, at most one each.
	if counted != int64(busy) || rejected == 0 || rejected > counted {
		t.Errorf("fence rejections counted: %d writes, %d purchases; want %d purchases, one per 503, in 1 to %d writes", rejected, counted, busy, busy)
	}
	if lost := a.Metrics().LeasesLost() + b.Metrics().LeasesLost(); lost == 0 {
		t.Error("no lost lease counted")
	}
}

// The same race made certain with the meet hook: holder A stalls until
// holder B, let in when A's lease ran out, has read the stock too. With the
// fence, A's write is refused and B's counts. With the fence off (the
// unsafe switch), both write: two sold for one item.
func TestLeaseExpiryCertain(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: multi-replica sale")
	}
	pgtest.EachDB(t, func(t *testing.T, db string) {
		for _, unsafe := range []bool{false, true} {
			name := "fenced"
			if unsafe {
				name = "unsafe-no-fence"
			}
			t.Run(name, func(t *testing.T) {
				c := newClusterOn(t, db)
				hook := meet(2, 10*time.Second)
				edit := func(cfg *app.Config) {
					cfg.LockTTL = 300 * time.Millisecond
					cfg.LockRenew = false
					cfg.LockWait = time.Minute
					cfg.UnsafeNoFence = unsafe
					cfg.Chaos = hook
				}
				a, b := c.replica(edit), c.replica(edit)
				id := createProduct(t, a.Handler(), 1)
				statuses := rush(id, 2, a, b)
				p := getProduct(t, b.Handler(), id)
				t.Logf("statuses %v; %d sold, stock %d", statuses, p.Sold, p.Stock)
				if unsafe {
					if p.Sold != 2 || statuses[http.StatusCreated] != 2 {
						t.Errorf("got %d sold, statuses %v; want the oversell: 2 sold for 1 item", p.Sold, statuses)
					}
					return
				}
				if p.Sold != 1 || p.Stock != 0 || statuses[http.StatusCreated] != 1 || statuses[http.StatusServiceUnavailable] != 1 {
					t.Errorf("got %d sold, stock %d, statuses %v; want 1 sold, stock 0, one 201 and one 503", p.Sold, p.Stock, statuses)
				}
				if n := a.Metrics().FenceRejections() + b.Metrics().FenceRejections(); n != 1 {
					t.Errorf("fence rejections: got %d, want 1", n)
				}
			})
		}
	})
}

// replicasMeeting starts n replicas in mode whose lock holders all run
// hook inside their critical section, with waits long enough that nobody
// answers busy.
func (c *cluster) replicasMeeting(n int, mode app.LockMode, hook func(context.Context, []int64)) []*app.Server {
	var replicas []*app.Server
	for range n {
		replicas = append(replicas, c.replica(func(cfg *app.Config) {
			cfg.Lock = mode
			cfg.LockWait = time.Minute
			cfg.Chaos = hook
		}))
	}
	return replicas
}
