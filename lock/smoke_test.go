package lock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/redistest"
)

func TestSmoke(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var lockers []*Locker
	for range 2 {
		l, err := New(srv.Client(), Options{TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		lockers = append(lockers, l)
	}
	lk, err := lockers[0].Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("token %d", lk.Token())
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var holders, maxHolders, count atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[i%2]
			for range 20 {
				lk, err := l.Acquire(ctx, "hot")
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				h := holders.Add(1)
				if h > maxHolders.Load() {
					maxHolders.Store(h)
				}
				count.Add(1)
				time.Sleep(100 * time.Microsecond)
				holders.Add(-1)
				if err := lk.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d acquisitions in %v, max holders %d", count.Load(), time.Since(start), maxHolders.Load())
}
