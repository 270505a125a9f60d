package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

// The reservation rows' client (matrix_life.go): the calls of a
// reservation's life, with the fields the API shows of it.

// lifeProduct and lifeOrder are the API's product and order with the
// fields of a reservation's life.
type lifeProduct struct {
	Stock    int64 `json:"stock"`
	Reserved int64 `json:"reserved"`
	Sold     int64 `json:"sold"`
}

type lifeOrder struct {
	ID        int64     `json:"id"`
	UserID    string    `json:"user_id"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	ClosedAt  time.Time `json:"closed_at,omitzero"`
}

// lifeClient is the row's client of one replica.
type lifeClient struct{ *apiclient.Client }

func newLifeClient(hc *http.Client, base, token string) lifeClient {
	return lifeClient{apiclient.New(hc, base, token)}
}

// reserve buys for user: its order, or nil when sold out.
func (c lifeClient) reserve(ctx context.Context, user string) (*lifeOrder, error) {
	var out struct {
		Order lifeOrder `json:"order"`
	}
	err := c.Do(ctx, "purchase for "+user, http.MethodPost, fmt.Sprintf("/api/v1/products/%d/purchase", saleProduct),
		map[string]string{"user_id": user}, &out)
	if e, ok := errors.AsType[*apiclient.Error](err); ok && e.Code == "sold_out" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &out.Order, nil
}

// move pays or cancels an order, and reports whether it moved. An order
// whose window ended first (order_expired) is no error: it lapses
// instead, and did not move.
func (c lifeClient) move(ctx context.Context, verb string, o lifeOrder) (bool, error) {
	err := c.Do(ctx, verb+" order", http.MethodPost, fmt.Sprintf("/api/v1/orders/%d/%s", o.ID, verb),
		map[string]string{"user_id": o.UserID}, nil)
	if e, ok := errors.AsType[*apiclient.Error](err); ok && e.Code == "order_expired" {
		return false, nil
	}
	return err == nil, err
}

// state reads the product and its orders.
func (c lifeClient) state(ctx context.Context) (lifeProduct, []lifeOrder, error) {
	var p lifeProduct
	if err := c.Do(ctx, "read the product", http.MethodGet, fmt.Sprintf("/api/v1/products/%d", saleProduct), nil, &p); err != nil {
		return p, nil, err
	}
	var orders []lifeOrder
	var after int64
	for {
		var page struct {
			Orders []lifeOrder `json:"orders"`
			Next   *int64      `json:"next"`
		}
		path := fmt.Sprintf("/api/v1/products/%d/orders?limit=%d&after=%d", saleProduct, apiclient.OrdersPageSize, after)
		if err := c.Do(ctx, "list the orders", http.MethodGet, path, nil, &page); err != nil {
			return p, nil, err
		}
		orders = append(orders, page.Orders...)
		if page.Next == nil || *page.Next <= after {
			return p, orders, nil
		}
		after = *page.Next
	}
}

// each runs fn for every item, lifeWorkers at a time, and joins the
// errors.
func each[T any](items []T, fn func(int, T) error) error {
	errs := make([]error, len(items))
	sem := make(chan struct{}, lifeWorkers)
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = fn(i, it)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
