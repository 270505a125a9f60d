package dashboard_test

import (
	"cmp"
	"context"
	"encoding/json"
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

// readCounter is the store, counting the dashboard's reads: the ids of
// each ProductsByID, and the calls of Inventory.
type readCounter struct {
	*store.Store
	mu          sync.Mutex
	byID        [][]int64
	inventories int
}

func (r *readCounter) ProductsByID(ctx context.Context, ids []int64) ([]*seckill.Product, error) {
	r.mu.Lock()
	r.byID = append(r.byID, slices.Clone(ids))
	r.mu.Unlock()
	return r.Store.ProductsByID(ctx, ids)
}

func (r *readCounter) Inventory(ctx context.Context, except []int64) (seckill.Inventory, error) {
	r.mu.Lock()
	r.inventories++
	r.mu.Unlock()
	return r.Store.Inventory(ctx, except)
}

// take returns the reads counted since the last take.
func (r *readCounter) take() (byID [][]int64, inventories int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID, inventories = r.byID, r.inventories
	r.byID, r.inventories = nil, 0
	return byID, inventories
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
// product fields per replica, however many products were sold. The poll,
// as JSON, has exactly the TopN products with the most orders summed over
// the window, most first, ties by id, and totals that are the database's.
func TestManyProducts(t *testing.T) {
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
	// 1000/(r+1)+1 times, but the 5th as often as the 4th, with a smaller
	// id: a tie, broken by id. In the next second, b sells the 15th of a's
	// 2,000 times, making it the hottest once the window's seconds are
	// summed, and 31 others once.
	ids := rand.New(rand.NewPCG(1, 2)).Perm(products)[:sold]
	if ids[3] < ids[4] {
		ids[3], ids[4] = ids[4], ids[3]
	}
	want := map[int64]int64{}
	var total int64
	place := func(d *dashboard.Dashboard, id int64, n int64) {
		d.OrdersPlaced(id, int(n))
		d.PurchaseDone(seckill.OutcomeCreated, time.Millisecond)
		want[id] += n
		total += n
	}
	for r, i := range ids {
		if r == 4 {
			r = 3
		}
		place(a, int64(i+1), int64(1000/(r+1)+1))
	}
	clock.Add(1)
	place(b, int64(ids[14]+1), 2000)
	for _, i := range ids[100:131] {
		place(b, int64(i+1), 1)
	}
	a.Close()
	b.Close()

	flushes, inventories := reads.take()
	if len(flushes) != 2 || inventories != 0 {
		t.Errorf("the two flushes read %d times by id and %d inventories; want once each by id, no inventory", len(flushes), inventories)
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
	polls, inventories := reads.take()
	if len(polls) != 1 || len(polls[0]) != dashboard.TopN || inventories != 1 {
		t.Errorf("the poll read by id %v and %d inventories; want %d products once and one inventory", lens(polls), inventories, dashboard.TopN)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Inventory, Others dashboard.Inventory
		Top               []dashboard.Product
		Seconds           []dashboard.Second
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}

	all, err := st.Products(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var inv, others dashboard.Inventory
	hottest := slices.SortedFunc(func(yield func(int64) bool) {
		for id := range want {
			if !yield(id) {
				return
			}
		}
	}, func(x, y int64) int { return cmp.Or(cmp.Compare(want[y], want[x]), cmp.Compare(x, y)) })[:dashboard.TopN]
	for _, p := range all {
		count(&inv, p)
		if !slices.Contains(hottest, p.ID) {
			count(&others, p)
		}
	}
	if len(got.Top) != dashboard.TopN {
		t.Fatalf("top: got %d products, want %d", len(got.Top), dashboard.TopN)
	}
	for i, id := range hottest {
		p := all[id-1]
		w := dashboard.Product{ID: id, Name: p.Name, Stock: p.Stock, Sold: p.Sold, Orders: want[id]}
		if got.Top[i] != w {
			t.Errorf("top %d: got %+v, want %+v", i+1, got.Top[i], w)
		}
	}
	if got.Inventory != inv || got.Others != others {
		t.Errorf("inventory %+v, others %+v; want %+v, %+v", got.Inventory, got.Others, inv, others)
	}
	if inv.SoldOut == 0 || inv.Sold == 0 {
		t.Fatalf("the catalog has no product sold out or none sold: %+v", inv)
	}
	if n := sum(got.Seconds, func(s dashboard.Second) int64 { return s.Orders }); n != total {
		t.Errorf("orders in the seconds: got %d, want %d", n, total)
	}
	// a's hottest, with its orders and its stock as sampled.
	hot := int64(ids[0] + 1)
	if len(got.Seconds) != 2 {
		t.Fatalf("got %d seconds, want 2", len(got.Seconds))
	}
	ps := got.Seconds[0].Products[fmt.Sprint(hot)]
	if stock := hot % 7 * 10; ps.Orders != want[hot] || ps.Stock == nil || *ps.Stock != stock {
		t.Errorf("the hottest product in its second: got %+v, want %d orders and stock %d", ps, want[hot], stock)
	}
}

func count(i *dashboard.Inventory, p *seckill.Product) {
	i.Products++
	i.Stock += p.Stock
	i.Sold += p.Sold
	if p.Stock <= 0 {
		i.SoldOut++
	}
}

func lens(reads [][]int64) []int {
	n := make([]int, len(reads))
	for i, r := range reads {
		n[i] = len(r)
	}
	return n
}
