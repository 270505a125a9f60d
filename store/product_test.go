package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// catalog is four products: a with stock 5; b with none; c with stock 1
// after 2 sold; d with stock 7. It returns their ids.
func catalog(t *testing.T, s *store.Store) (a, b, c, d int64) {
	t.Helper()
	ctx := context.Background()
	a, b, c, d = newProduct(t, s, 5).ID, newProduct(t, s, 0).ID, newProduct(t, s, 3).ID, newProduct(t, s, 7).ID
	for _, user := range []string{"u1", "u2"} {
		if err := s.InsertOrder(ctx, &seckill.Order{ProductID: c, UserID: user, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetStock(ctx, c, 1); err != nil {
		t.Fatal(err)
	}
	return a, b, c, d
}

// The products asked for, each once, by id, as the database has them; an
// id with no product is left out.
func TestProductsByID(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		a, _, c, d := catalog(t, s)
		got, err := s.ProductsByID(ctx, []int64{d, c, 999, a, c})
		if err != nil {
			t.Fatal(err)
		}
		want := []seckill.Product{{ID: a, Stock: 5}, {ID: c, Stock: 1, Sold: 2}, {ID: d, Stock: 7}}
		if len(got) != len(want) {
			t.Fatalf("got %d products, want %d: %v", len(got), len(want), got)
		}
		for i, p := range got {
			if p.ID != want[i].ID || p.Name != "phone" || p.Stock != want[i].Stock || p.Sold != want[i].Sold {
				t.Errorf("product %d: got %+v, want %+v named phone", i, *p, want[i])
			}
		}
		if got, err := s.ProductsByID(ctx, nil); err != nil || len(got) != 0 {
			t.Errorf("no ids: got %v, %v; want none, no error", got, err)
		}
	})
}

// The sums over every product but those excepted; with nothing excepted
// (where NOT IN () would be wrong SQL, and NOT IN (NULL) would match no
// row), every product.
func TestInventory(t *testing.T) {
	t.Parallel()
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		if got, err := s.Inventory(ctx, nil); err != nil || got != (seckill.Inventory{}) {
			t.Errorf("no products: got %+v, %v; want zeros", got, err)
		}
		a, b, c, d := catalog(t, s)
		for _, tt := range []struct {
			name   string
			except []int64
			want   seckill.Inventory
		}{
			{"every product", nil, seckill.Inventory{Products: 4, Stock: 13, Sold: 2, SoldOut: 1}},
			{"an id with no product", []int64{999}, seckill.Inventory{Products: 4, Stock: 13, Sold: 2, SoldOut: 1}},
			{"all but b and d", []int64{a, c}, seckill.Inventory{Products: 2, Stock: 7, SoldOut: 1}},
			{"all but c", []int64{a, b, d}, seckill.Inventory{Products: 1, Stock: 1, Sold: 2}},
			{"none", []int64{a, b, c, d}, seckill.Inventory{}},
		} {
			got, err := s.Inventory(ctx, tt.except)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if got != tt.want {
				t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
			}
		}
	})
}
