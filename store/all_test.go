package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// The shared read of several products: each product with the buyers found
// among its own users only (a user who bought another product is not its
// buyer), and a missing product left out.
func TestProductsAndBuyers(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p, q := newProduct(t, s, 5), newProduct(t, s, 7)
		for _, o := range []*seckill.Order{order(p.ID, 0, "a"), order(q.ID, 0, "b"), order(q.ID, 0, "c")} {
			if err := s.InsertOrder(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		products, bought, err := s.ProductsAndBuyers(ctx, []seckill.BuyersOf{
			{ProductID: p.ID, UserIDs: []string{"a", "b"}},
			{ProductID: q.ID, UserIDs: []string{"a", "c", "d"}},
			{ProductID: 42, UserIDs: []string{"a"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(products) != 2 || products[p.ID].Stock != 5 || products[p.ID].Sold != 1 || products[q.ID].Stock != 7 || products[q.ID].Sold != 2 {
			t.Errorf("products: got %v, want %d (stock 5, sold 1) and %d (stock 7, sold 2)", products, p.ID, q.ID)
		}
		if !maps.Equal(bought[p.ID], map[string]bool{"a": true}) || !maps.Equal(bought[q.ID], map[string]bool{"c": true}) || len(bought[42]) != 0 {
			t.Errorf("buyers: got %v, want a of %d and c of %d", bought, p.ID, q.ID)
		}
	})
}

// Claims of several products: each claim with its own token, refused on
// its own (a token not above its product's fence, or no such product),
// and the reads of the products claimed come after every claim.
func TestClaimAndReadAll(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p, q, r := newProduct(t, s, 5), newProduct(t, s, 6), newProduct(t, s, 7)
		if err := s.InsertOrder(ctx, order(p.ID, 0, "a")); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimFence(ctx, q.ID, 50); err != nil {
			t.Fatal(err)
		}
		claims := []seckill.Claim{
			{ProductID: r.ID, Token: 10, UserIDs: []string{"x"}},
			{ProductID: p.ID, Token: 20, UserIDs: []string{"a", "b"}},
			{ProductID: q.ID, Token: 30, UserIDs: []string{"a"}}, // behind its fence
			{ProductID: 4242, Token: 40, UserIDs: []string{"a"}}, // no such product
		}
		got, err := s.ClaimAndReadAll(ctx, claims)
		if err != nil {
			t.Fatal(err)
		}
		if c := got[1]; c.Err != nil || c.Product.ID != p.ID || c.Product.Fence != 20 || c.Product.Stock != 5 || c.Product.Sold != 1 || !maps.Equal(c.Bought, map[string]bool{"a": true}) {
			t.Errorf("claim of %d: got %+v (product %+v), want fence 20, stock 5, sold 1, buyer a", p.ID, c, c.Product)
		}
		if c := got[0]; c.Err != nil || c.Product.ID != r.ID || c.Product.Fence != 10 || len(c.Bought) != 0 {
			t.Errorf("claim of %d: got %+v, want fence 10 and no buyer", r.ID, c)
		}
		for _, i := range []int{2, 3} {
			if !errors.Is(got[i].Err, seckill.ErrFenceRejected) || got[i].Product != nil {
				t.Errorf("claim %d (product %d, token %d): got %+v, want ErrFenceRejected and nothing read", i, claims[i].ProductID, claims[i].Token, got[i])
			}
		}
		if pq, _ := s.Product(ctx, q.ID); pq.Fence != 50 {
			t.Errorf("the refused claim moved the fence to %d, want it at 50", pq.Fence)
		}
	})
}

// One transaction for several products' orders: a product whose fence
// moved on writes nothing and is refused alone; the others are written,
// each order with its id, stock and sold set.
func TestPlaceOrdersAllRefusesEachProductOnItsOwn(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p, q := newProduct(t, s, 5), newProduct(t, s, 5)
		for id, token := range map[int64]int64{p.ID: 7, q.ID: 8} {
			if err := s.ClaimFence(ctx, id, token); err != nil {
				t.Fatal(err)
			}
		}
		// q's lock changed hands: a newer holder claimed its fence.
		if err := s.ClaimFence(ctx, q.ID, 9); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		ps := []seckill.Placement{
			{ProductID: q.ID, Token: 8, NewStock: 4, Orders: []*seckill.Order{{ProductID: q.ID, UserID: "late", Fence: 8, CreatedAt: now}}},
			{ProductID: p.ID, Token: 7, NewStock: 3, Orders: []*seckill.Order{
				{ProductID: p.ID, UserID: "u1", Fence: 7, CreatedAt: now}, {ProductID: p.ID, UserID: "u2", Fence: 7, CreatedAt: now}}},
		}
		refused, err := s.PlaceOrdersAll(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(refused[0], seckill.ErrFenceRejected) || refused[1] != nil {
			t.Fatalf("refused: got %v, want q's write refused and p's not", refused)
		}
		if got, _ := s.Product(ctx, p.ID); got.Stock != 3 || got.Sold != 2 {
			t.Errorf("p after the write: stock %d, sold %d; want 3 and 2", got.Stock, got.Sold)
		}
		if got, _ := s.Product(ctx, q.ID); got.Stock != 5 || got.Sold != 0 {
			t.Errorf("q after its refused write: stock %d, sold %d; want 5 and 0, unchanged", got.Stock, got.Sold)
		}
		if len(allOrders(t, s, q.ID)) != 0 {
			t.Error("q has an order of the refused write")
		}
		orders := allOrders(t, s, p.ID)
		if len(orders) != 2 || orders[0].ID != ps[1].Orders[0].ID || orders[1].ID != ps[1].Orders[1].ID || orders[0].ID == 0 {
			t.Errorf("p's orders: got %+v, want u1 and u2 with the ids the write set (%d, %d)", orders, ps[1].Orders[0].ID, ps[1].Orders[1].ID)
		}
		// A duplicate order fails its product alone: nothing of it stays,
		// and the other product is written.
		ps = []seckill.Placement{
			{ProductID: p.ID, Token: 7, NewStock: 2, Orders: []*seckill.Order{{ProductID: p.ID, UserID: "u3", Fence: 7, CreatedAt: now}}},
			{ProductID: q.ID, Token: 9, NewStock: 3, Orders: []*seckill.Order{{ProductID: q.ID, UserID: "v", Fence: 9, CreatedAt: now}, {ProductID: q.ID, UserID: "v", Fence: 9, CreatedAt: now}}},
		}
		refused, err = s.PlaceOrdersAll(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if refused[0] != nil || !errors.Is(refused[1], seckill.ErrAlreadyPurchased) {
			t.Errorf("a duplicate order of q: got %v, want q alone refused with ErrAlreadyPurchased", refused)
		}
		if got, _ := s.Product(ctx, p.ID); got.Stock != 2 || got.Sold != 3 || len(allOrders(t, s, p.ID)) != 3 {
			t.Errorf("p beside q's duplicate: stock %d, sold %d; want 2 and 3, and 3 orders", got.Stock, got.Sold)
		}
		if got, _ := s.Product(ctx, q.ID); got.Stock != 5 || got.Sold != 0 || len(allOrders(t, s, q.ID)) != 0 {
			t.Errorf("q after its duplicate: stock %d, sold %d; want 5 and 0, and no order", got.Stock, got.Sold)
		}
	})
}

// A round of ten products, one of whose buyers already has an order that
// another writer of the database inserted after the round read: the
// unique index refuses that product's orders, and that product alone
// writes nothing; the nine others are written. Nothing of it is answered
// for a product that did not have the duplicate.
func TestPlaceOrdersAllRefusesAnotherWritersDuplicateAlone(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		now := time.Now().UTC()
		var ps []seckill.Placement
		for i := range 10 {
			p := newProduct(t, s, 5)
			token := int64(100 + i)
			if err := s.ClaimFence(ctx, p.ID, token); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, seckill.Placement{ProductID: p.ID, Token: token, NewStock: 3, Orders: []*seckill.Order{
				{ProductID: p.ID, UserID: "a", Fence: token, CreatedAt: now}, {ProductID: p.ID, UserID: "b", Fence: token, CreatedAt: now}}})
		}
		const dup = 6
		// Another writer (no fence, no lock) sells b an item of product 6.
		other := &seckill.Order{ProductID: ps[dup].ProductID, UserID: "b", CreatedAt: now}
		if err := s.InsertOrder(ctx, other); err != nil {
			t.Fatal(err)
		}
		refused, err := s.PlaceOrdersAll(ctx, ps)
		if err != nil {
			t.Fatalf("PlaceOrdersAll: %v, want only product %d refused", err, ps[dup].ProductID)
		}
		for i, p := range ps {
			got, _ := s.Product(ctx, p.ProductID)
			orders := allOrders(t, s, p.ProductID)
			if i == dup {
				if !errors.Is(refused[i], seckill.ErrAlreadyPurchased) {
					t.Errorf("product %d, with the duplicate: got %v, want ErrAlreadyPurchased", p.ProductID, refused[i])
				}
				if got.Stock != 5 || len(orders) != 1 || orders[0].ID != other.ID {
					t.Errorf("product %d, with the duplicate: stock %d, orders %+v; want 5 and only the other writer's", p.ProductID, got.Stock, orders)
				}
				continue
			}
			if refused[i] != nil {
				t.Errorf("product %d, without a duplicate: got %v, want it written", p.ProductID, refused[i])
			}
			if got.Stock != 3 || got.Sold != 2 || len(orders) != 2 || orders[0].ID != p.Orders[0].ID || orders[0].ID == 0 {
				t.Errorf("product %d: stock %d, sold %d, orders %+v; want 3, 2 and a and b with their ids", p.ProductID, got.Stock, got.Sold, orders)
			}
		}
	})
}

// Two rounds of the group commit that meet on the same products in
// opposite orders (a holder whose lease ran out, and its successor) do not
// deadlock: each locks the rows by product id.
func TestPlaceOrdersAllInOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		var ids []int64
		for range 20 {
			p := newProduct(t, s, 1000)
			ids = append(ids, p.ID)
			if err := s.ClaimFence(ctx, p.ID, 1); err != nil {
				t.Fatal(err)
			}
		}
		placements := func(who string, n int, reverse bool) []seckill.Placement {
			ps := make([]seckill.Placement, len(ids))
			for i, id := range ids {
				if reverse {
					id = ids[len(ids)-1-i]
				}
				ps[i] = seckill.Placement{ProductID: id, Token: 1, NewStock: 0, Orders: []*seckill.Order{
					{ProductID: id, UserID: fmt.Sprintf("%s-%d", who, n), Fence: 1, CreatedAt: time.Now().UTC()}}}
			}
			return ps
		}
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for w, reverse := range []bool{false, true} {
			wg.Go(func() {
				for n := range 20 {
					if _, err := s.PlaceOrdersAll(ctx, placements(fmt.Sprint(w), n, reverse)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, id := range ids {
			if n := len(allOrders(t, s, id)); n != 40 {
				t.Errorf("product %d: %d orders, want 40", id, n)
			}
		}
	})
}

// The lookup of (product, user) pairs on SQLite probes the buyer index
// once per pair. The control, a row value IN the list of pairs, is planned
// as a scan of every order, which the check must catch.
func TestSQLiteBuyerLookupUsesTheIndex(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/seckill.db"
	open(t, db)
	raw := rawDB(t, db)
	plan := func(query string, args ...any) string {
		rows, err := raw.Query("EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var steps []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, detail)
		}
		return strings.Join(steps, "; ")
	}
	probes := func(p string) bool {
		return strings.Contains(p, "INDEX idx_orders_live (product_id=? AND user_id=?)") && strings.Contains(p, "SEARCH o USING") &&
			!strings.Contains(p, "SCAN o")
	}
	if p := plan(store.SQLiteProductsAndBuyers, `[1,2,3]`, `[[1,"u1"],[2,"u2"],[3,"u3"]]`); !probes(p) {
		t.Errorf("the store's lookup: plan %q, want one probe of the buyer index per pair", p)
	}
	control := "SELECT product_id, user_id FROM orders o WHERE (product_id, user_id) IN (VALUES (?, ?), (?, ?), (?, ?))"
	if p := plan(control, 1, "u1", 2, "u2", 3, "u3"); probes(p) {
		t.Errorf("the control: plan %q probes the index; the check would not catch a scan", p)
	}
}

// The calls of several products given one (PostgreSQL sends the
// statements of one product then): the same answers as for several, a
// refused claim or write and a missing product included.
func TestAllOfOneProduct(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		p := newProduct(t, s, 5)
		if err := s.InsertOrder(ctx, order(p.ID, 0, "a")); err != nil {
			t.Fatal(err)
		}
		products, bought, err := s.ProductsAndBuyers(ctx, []seckill.BuyersOf{{ProductID: p.ID, UserIDs: []string{"a", "b"}}})
		if err != nil || products[p.ID].Sold != 1 || !maps.Equal(bought[p.ID], map[string]bool{"a": true}) {
			t.Errorf("ProductsAndBuyers: got %v, %v, %v; want product %d sold 1, buyer a", products, bought, err, p.ID)
		}
		if products, _, err := s.ProductsAndBuyers(ctx, []seckill.BuyersOf{{ProductID: 4242, UserIDs: []string{"a"}}}); err != nil || len(products) != 0 {
			t.Errorf("ProductsAndBuyers of no such product: got %v, %v; want none and no error", products, err)
		}

		got, err := s.ClaimAndReadAll(ctx, []seckill.Claim{{ProductID: p.ID, Token: 20, UserIDs: []string{"a", "b"}}})
		if err != nil || got[0].Err != nil || got[0].Product.Fence != 20 || !maps.Equal(got[0].Bought, map[string]bool{"a": true}) {
			t.Fatalf("ClaimAndReadAll: got %+v, %v; want fence 20 and buyer a", got, err)
		}
		for _, c := range []seckill.Claim{{ProductID: p.ID, Token: 10, UserIDs: []string{"b"}}, {ProductID: 4242, Token: 30, UserIDs: []string{"b"}}} {
			got, err := s.ClaimAndReadAll(ctx, []seckill.Claim{c})
			if err != nil || !errors.Is(got[0].Err, seckill.ErrFenceRejected) || got[0].Product != nil {
				t.Errorf("ClaimAndReadAll of product %d with token %d: got %+v, %v; want ErrFenceRejected, nothing read", c.ProductID, c.Token, got, err)
			}
		}

		now := time.Now().UTC()
		place := func(token int64, users ...string) ([]error, error) {
			var orders []*seckill.Order
			for _, u := range users {
				orders = append(orders, &seckill.Order{ProductID: p.ID, UserID: u, Fence: token, CreatedAt: now})
			}
			return s.PlaceOrdersAll(ctx, []seckill.Placement{{ProductID: p.ID, Token: token, NewStock: 5 - int64(len(users)), Orders: orders}})
		}
		if refused, err := place(19, "b"); err != nil || !errors.Is(refused[0], seckill.ErrFenceRejected) {
			t.Errorf("PlaceOrdersAll behind the fence: got %v, %v; want ErrFenceRejected", refused, err)
		}
		if refused, err := place(20, "c", "c"); err != nil || !errors.Is(refused[0], seckill.ErrAlreadyPurchased) {
			t.Errorf("PlaceOrdersAll of a duplicate order: got %v, %v; want the product refused with ErrAlreadyPurchased", refused, err)
		}
		if got, _ := s.Product(ctx, p.ID); got.Stock != 5 || got.Sold != 1 || len(allOrders(t, s, p.ID)) != 1 {
			t.Fatalf("after the refused and failed writes: stock %d, sold %d; want 5 and 1, and 1 order", got.Stock, got.Sold)
		}
		refused, err := place(20, "b", "c")
		if err != nil || refused[0] != nil {
			t.Fatalf("PlaceOrdersAll: got %v, %v", refused, err)
		}
		if got, _ := s.Product(ctx, p.ID); got.Stock != 3 || got.Sold != 3 || len(allOrders(t, s, p.ID)) != 3 {
			t.Errorf("after the write: stock %d, sold %d; want 3 and 3, and 3 orders", got.Stock, got.Sold)
		}
	})
}
