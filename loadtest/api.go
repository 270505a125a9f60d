package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Product is the API's product as the load test reads it.
type Product struct {
	ID    int64  `json:"id"`
	Name  string `json:"name"`
	Stock int64  `json:"stock"`
	Sold  int64  `json:"sold"`
}

// Order is the API's order as the load test reads it.
type Order struct {
	ID        int64     `json:"id"`
	ProductID int64     `json:"product_id"`
	UserID    string    `json:"user_id"`
	Fence     int64     `json:"fence"`
	CreatedAt time.Time `json:"created_at"`
}

// APIError is a non-2xx answer of the API, with the error code and message
// of its JSON body when it had one.
type APIError struct {
	Op      string // what the load test was doing
	Status  int
	Code    string
	Message string
}

// Error implements error.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Status == http.StatusUnauthorized {
		msg += " (is the admin token right? -admin-token or ADMIN_TOKEN)"
	}
	return msg
}

// ordersPageSize is the limit asked for per page; the loop follows the
// server's next cursor, so a server with a smaller cap still gets read to
// the end.
const ordersPageSize = 500

// maxAPIBody bounds what one API answer may take in memory.
const maxAPIBody = 32 << 20

// api is a client of the endpoints the set-up and the verification need.
type api struct {
	client *http.Client
	base   string // normalised target
	token  string
}

func (a api) health(ctx context.Context) error {
	var body struct{ Status string }
	return a.do(ctx, "check "+a.base+"/healthz", http.MethodGet, "/healthz", nil, &body)
}

func (a api) createProduct(ctx context.Context, name string, stock int64) (Product, error) {
	in := struct {
		Name  string `json:"name"`
		Stock int64  `json:"stock"`
	}{name, stock}
	var p Product
	err := a.do(ctx, "create product", http.MethodPost, "/api/v1/products", in, &p)
	return p, err
}

func (a api) product(ctx context.Context, id int64) (Product, error) {
	var p Product
	op := fmt.Sprintf("read product %d from %s", id, a.base)
	err := a.do(ctx, op, http.MethodGet, "/api/v1/products/"+strconv.FormatInt(id, 10), nil, &p)
	return p, err
}

// orders reads every order of product id, page by page with the cursor, so
// that reading a big sale costs O(orders).
func (a api) orders(ctx context.Context, id int64) ([]Order, error) {
	var orders []Order
	var after int64
	for {
		var page struct {
			Orders []Order `json:"orders"`
			Next   *int64  `json:"next"`
		}
		path := fmt.Sprintf("/api/v1/products/%d/orders?limit=%d&after=%d", id, ordersPageSize, after)
		if err := a.do(ctx, fmt.Sprintf("list orders of product %d", id), http.MethodGet, path, nil, &page); err != nil {
			return nil, err
		}
		orders = append(orders, page.Orders...)
		if page.Next == nil || *page.Next <= after {
			return orders, nil
		}
		after = *page.Next
	}
}

// snapshot reads the product, its orders, then the product again, until the
// two product reads agree: a request the client gave up on may still be
// finishing on the server, and a check over a moving target would blame the
// service for the load test's own timing. listed is when the last orders
// listing had ended: before the last product read began.
func (a api) snapshot(ctx context.Context, id int64) (p Product, orders []Order, listed time.Time, err error) {
	const attempts = 5
	wait := 50 * time.Millisecond
	for i := 0; ; i++ {
		if p, err = a.product(ctx, id); err != nil {
			return
		}
		if orders, err = a.orders(ctx, id); err != nil {
			return
		}
		listed = time.Now()
		again, err2 := a.product(ctx, id)
		if err2 != nil {
			return p, nil, listed, err2
		}
		if again == p || i == attempts-1 {
			return again, orders, listed, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, nil, listed, ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// do sends one request with a JSON body (if in is not nil) and decodes a 2xx
// JSON answer into out; anything else becomes an *APIError.
func (a api) do(ctx context.Context, op, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" && method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if err != nil {
		return fmt.Errorf("%s: read answer: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := &APIError{Op: op, Status: resp.StatusCode}
		var e struct{ Error, Message string }
		if json.Unmarshal(raw, &e) == nil {
			apiErr.Code, apiErr.Message = e.Error, e.Message
		}
		return apiErr
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: answer is not the JSON expected: %w", op, err)
	}
	return nil
}
