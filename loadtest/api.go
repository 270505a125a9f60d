package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

// Product is the API's product as the load test reads it.
type Product = apiclient.Product

// Order is the API's order as the load test reads it.
type Order = apiclient.Order

// The states of an order, as the API names them.
const (
	StatePending   = apiclient.StatePending
	StatePaid      = apiclient.StatePaid
	StateCancelled = apiclient.StateCancelled
	StateExpired   = apiclient.StateExpired
)

// APIError is a non-2xx answer of the API, with the error code and message
// of its JSON body when it had one.
type APIError = apiclient.Error

// api is a client of the endpoints the set-up and the verification need.
type api struct{ *apiclient.Client }

// createProduct is the client's CreateProduct; a 401 also says which
// setting holds the token.
func (a api) createProduct(ctx context.Context, name string, stock int64) (Product, error) {
	p, err := a.CreateProduct(ctx, name, stock)
	if apiErr, ok := errors.AsType[*APIError](err); ok && apiErr.Status == http.StatusUnauthorized {
		err = fmt.Errorf("%w (is the admin token right? -admin-token or ADMIN_TOKEN)", err)
	}
	return p, err
}

// snapshot reads the product, its orders, then the product again, until the
// two product reads agree: a request the client gave up on may still be
// finishing on the server, and a check over a moving target would blame the
// service for the load test's own timing. With settle > 0 it also waits, up
// to settle, until the orders listed number the product's sold count: a
// service that writes orders in the background has answered 201s whose
// orders are still on their way. listed is when the last orders listing had
// ended: before the last product read began.
func (a api) snapshot(ctx context.Context, id int64, settle time.Duration) (p Product, orders []Order, listed time.Time, err error) {
	const attempts = 5
	wait := 50 * time.Millisecond
	settleBy := time.Now().Add(settle)
	for i := 0; ; i++ {
		if p, err = a.Product(ctx, id); err != nil {
			return
		}
		if orders, err = a.Orders(ctx, id); err != nil {
			return
		}
		listed = time.Now()
		again, err2 := a.Product(ctx, id)
		if err2 != nil {
			return p, nil, listed, err2
		}
		settling := int64(len(orders)) != again.Sold && time.Now().Before(settleBy)
		if !settling && (again == p || i >= attempts-1) {
			return again, orders, listed, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, nil, listed, ctx.Err()
		case <-t.C:
		}
		if !settling {
			wait *= 2
		}
	}
}
