package dashboard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/store"
)

// readCounter is the store, counting the dashboard's reads by id: the ids
// of each ProductsByID.
type readCounter struct {
	*store.Store
	mu   sync.Mutex
	byID [][]int64
}

func (r *readCounter) ProductsByID(ctx context.Context, ids []int64) ([]*seckill.Product, error) {
	r.mu.Lock()
	r.byID = append(r.byID, slices.Clone(ids))
	r.mu.Unlock()
	return r.Store.ProductsByID(ctx, ids)
}

// take returns the reads counted since the last take.
func (r *readCounter) take() (byID [][]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID = r.byID
	r.byID = nil
	return byID
}

// manyProducts is a real SQLite file with n products, p0 to p<n-1>, with
// ids 1 to n and stock (id % 7) * 10, so that some are sold out.
func manyProducts(t *testing.T, n int) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "seckill.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		p := &seckill.Product{Name: fmt.Sprintf("p%d", i-1), Stock: int64(i%7) * 10}
		if err := st.CreateProduct(ctx, p); err != nil {
			t.Fatal(err)
		}
		if p.ID != int64(i) {
			t.Fatalf("product %d got id %d", i, p.ID)
		}
	}
	return st
}

// Two seconds of a sale over 2,000 products, 300 of them sold in the
// first: each replica's flush reads the database once, for at most
// SampleTop products, and a second's hash holds at most 3*SampleTop
// product fields per replica, however many products were sold; the
// seconds still count every order.
func TestManyProductsCost(t *testing.T) {
	const products, sold = 2000, 300
	r := redistest.Start(t)
	st := manyProducts(t, products)
	ctx := context.Background()
	// Two products with orders in the database, one of them sold out.
	for i, id := range []int64{7, 7, 8} {
		if err := st.InsertOrder(ctx, &seckill.Order{ProductID: id, UserID: fmt.Sprint("u", i), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	reads := &readCounter{Store: st}
	// One clock for every replica, moved by the test.
	second := time.Now().Unix()
	var clock atomic.Int64
	clock.Store(second)
	a, b, c := dashboard.New(), dashboard.New(), dashboard.New()
	for _, d := range []*dashboard.Dashboard{a, b, c} {
		dashboard.SetClock(d, func() time.Time { return time.Unix(clock.Load(), 0) })
		d.Start(r.Client(), reads, nil)
		t.Cleanup(d.Close)
	}

	// a sells 300 products in a shuffled order of ids, the r-th (from 0)
	// 1000/(r+1)+1 times. In the next second, b sells the 15th of a's
	// 2,000 times, and 31 others once.
	ids := rand.New(rand.NewPCG(1, 2)).Perm(products)[:sold]
	want := map[int64]int64{}
	var total int64
	place := func(d *dashboard.Dashboard, id int64, n int64) {
		d.OrdersPlaced(id, int(n))
		d.PurchaseDone(seckill.OutcomeCreated, time.Millisecond)
		want[id] += n
		total += n
	}
	for r, i := range ids {
		place(a, int64(i+1), int64(1000/(r+1)+1))
	}
	clock.Add(1)
	place(b, int64(ids[14]+1), 2000)
	for _, i := range ids[100:131] {
		place(b, int64(i+1), 1)
	}
	a.Close()
	b.Close()

	flushes := reads.take()
	if len(flushes) != 2 {
		t.Errorf("the two flushes read %d times by id; want once each", len(flushes))
	}
	for i, read := range flushes {
		if len(read) > dashboard.SampleTop {
			t.Errorf("flush %d read %d products; want at most %d", i, len(read), dashboard.SampleTop)
		}
	}
	// Outcomes, wait buckets, fence, lost, total orders, one per replica;
	// then orders, stock and sold of each replica's busiest.
	fixed := len(seckill.Outcomes) + len(dashboard.WaitBuckets) + 1 + 2 + 1 + 2
	var fields []int64
	for sec := second; sec <= second+1; sec++ {
		n, err := r.Client().HLen(ctx, dashboard.KeyPrefix+fmt.Sprint(sec)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if limit := fixed + 2*3*dashboard.SampleTop; n > int64(limit) {
			t.Errorf("second %d's hash has %d fields; want at most %d", sec-second, n, limit)
		}
		fields = append(fields, n)
	}
	t.Logf("%d then 32 products sold in two seconds: reads by id %v, hash fields %v", sold, lens(flushes), fields)

	v, err := c.Data(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*dashboard.Data)
	if n := sum(got.Seconds, func(s dashboard.Second) int64 { return s.Orders }); n != total {
		t.Errorf("orders in the seconds: got %d, want %d", n, total)
	}
	// a's hottest, with its orders and its stock as sampled.
	hot := int64(ids[0] + 1)
	if len(got.Seconds) != 2 {
		t.Fatalf("got %d seconds, want 2", len(got.Seconds))
	}
	ps := got.Seconds[0].Products[fmt.Sprint(hot)]
	if stock := int64(ids[0]+1) % 7 * 10; ps.Orders != want[hot] || ps.Stock == nil || *ps.Stock != stock {
		t.Errorf("the hottest product in its second: got %+v, want %d orders and stock %d", ps, want[hot], stock)
	}
}

func lens(reads [][]int64) []int {
	n := make([]int, len(reads))
	for i, r := range reads {
		n[i] = len(r)
	}
	return n
}
