// Package apiclient is a small client of the service's v1 HTTP API: the
// calls that set up a sale and read it back (health, create and read a
// product, purchase, restock, list orders), and the moves of a
// reservation's life (read, pay and cancel an order). The load test, the fault suite
// and the handler and wiring tests all speak to the API through it, so the
// wire format is written down once on the client side.
//
// A non-2xx answer becomes an *Error carrying the HTTP status and the
// {"error": code, "message": text} body that every API error has.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Product is the API's product. Stock is what the API also calls
// available; Reserved counts the units of pending orders (0 without a
// payment window), and Stock + Reserved + Sold is the product's supply.
type Product struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Stock    int64  `json:"stock"`
	Reserved int64  `json:"reserved"`
	Sold     int64  `json:"sold"`
}

// Order is the API's order. State is "pending", "paid", "cancelled" or
// "expired" (docs/reservations.md); ExpiresAt is set while the order has
// a payment window, ClosedAt once it left pending.
type Order struct {
	ID        int64     `json:"id"`
	ProductID int64     `json:"product_id"`
	UserID    string    `json:"user_id"`
	Fence     int64     `json:"fence"`
	CreatedAt time.Time `json:"created_at"`
	State     string    `json:"state,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	ClosedAt  time.Time `json:"closed_at,omitzero"`
}

// The states of an order.
const (
	StatePending   = "pending"
	StatePaid      = "paid"
	StateCancelled = "cancelled"
	StateExpired   = "expired"
)

// Error is a non-2xx answer, with the code and message of its JSON body
// when it had one.
type Error struct {
	Op      string // what the client was doing, e.g. "create product"
	Status  int
	Code    string // the body's "error", e.g. "sold_out"
	Message string // the body's "message"
}

// Error implements error.
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// maxBody bounds what one answer may take in memory.
const maxBody = 32 << 20

// Client calls the API at Base. The zero HTTP uses http.DefaultClient.
type Client struct {
	HTTP  *http.Client
	Base  string // e.g. "http://127.0.0.1:8080", no trailing slash
	Token string // admin bearer token, sent on writes; "" for none
}

// New is a client of the API at base (its trailing slash is dropped).
func New(hc *http.Client, base, token string) *Client {
	return &Client{HTTP: hc, Base: strings.TrimRight(base, "/"), Token: token}
}

// Health checks GET /healthz.
func (c *Client) Health(ctx context.Context) error {
	var body struct{ Status string }
	return c.Do(ctx, "check "+c.Base+"/healthz", http.MethodGet, "/healthz", nil, &body)
}

// CreateProduct is POST /api/v1/products (admin).
func (c *Client) CreateProduct(ctx context.Context, name string, stock int64) (Product, error) {
	in := struct {
		Name  string `json:"name"`
		Stock int64  `json:"stock"`
	}{name, stock}
	var p Product
	err := c.Do(ctx, "create product", http.MethodPost, "/api/v1/products", in, &p)
	return p, err
}

// Product is GET /api/v1/products/:id.
func (c *Client) Product(ctx context.Context, id int64) (Product, error) {
	var p Product
	op := fmt.Sprintf("read product %d from %s", id, c.Base)
	err := c.Do(ctx, op, http.MethodGet, productPath(id), nil, &p)
	return p, err
}

// Products is GET /api/v1/products: every product, by id.
func (c *Client) Products(ctx context.Context) ([]Product, error) {
	var out struct {
		Products []Product `json:"products"`
	}
	err := c.Do(ctx, "list products on "+c.Base, http.MethodGet, "/api/v1/products", nil, &out)
	return out.Products, err
}

// Purchase is POST /api/v1/products/:id/purchase for user.
func (c *Client) Purchase(ctx context.Context, id int64, user string) (Order, error) {
	in := struct {
		UserID string `json:"user_id"`
	}{user}
	var out struct {
		Order Order `json:"order"`
	}
	op := fmt.Sprintf("purchase product %d for %s on %s", id, user, c.Base)
	err := c.Do(ctx, op, http.MethodPost, productPath(id)+"/purchase", in, &out)
	return out.Order, err
}

// Order is GET /api/v1/orders/:id.
func (c *Client) Order(ctx context.Context, id int64) (Order, error) {
	var out struct {
		Order Order `json:"order"`
	}
	err := c.Do(ctx, fmt.Sprintf("read order %d from %s", id, c.Base), http.MethodGet, orderPath(id), nil, &out)
	return out.Order, err
}

// Pay is POST /api/v1/orders/:id/pay for user: the order becomes paid.
func (c *Client) Pay(ctx context.Context, id int64, user string) (Order, error) {
	return c.move(ctx, "pay", id, user)
}

// Cancel is POST /api/v1/orders/:id/cancel for user: the order becomes
// cancelled, and its unit goes back on sale.
func (c *Client) Cancel(ctx context.Context, id int64, user string) (Order, error) {
	return c.move(ctx, "cancel", id, user)
}

// move is a payment or a cancel of order id by user.
func (c *Client) move(ctx context.Context, verb string, id int64, user string) (Order, error) {
	in := struct {
		UserID string `json:"user_id"`
	}{user}
	var out struct {
		Order Order `json:"order"`
	}
	op := fmt.Sprintf("%s order %d for %s on %s", verb, id, user, c.Base)
	err := c.Do(ctx, op, http.MethodPost, orderPath(id)+"/"+verb, in, &out)
	return out.Order, err
}

// Restock is PUT /api/v1/products/:id/stock (admin): it sets the stock.
func (c *Client) Restock(ctx context.Context, id, stock int64) (Product, error) {
	in := struct {
		Stock int64 `json:"stock"`
	}{stock}
	var p Product
	op := fmt.Sprintf("restock product %d on %s", id, c.Base)
	err := c.Do(ctx, op, http.MethodPut, productPath(id)+"/stock", in, &p)
	return p, err
}

// OrdersPageSize is the limit asked for per page by Orders.
const OrdersPageSize = 500

// Orders reads every order of product id, oldest first, page by page with
// the cursor (GET /api/v1/products/:id/orders?after=), so that reading a
// big sale costs O(orders). It follows the server's next cursor, so a
// server with a smaller page cap is still read to the end.
func (c *Client) Orders(ctx context.Context, id int64) ([]Order, error) {
	var orders []Order
	var after int64
	for {
		var page struct {
			Orders []Order `json:"orders"`
			Next   *int64  `json:"next"`
		}
		path := fmt.Sprintf("%s/orders?limit=%d&after=%d", productPath(id), OrdersPageSize, after)
		if err := c.Do(ctx, fmt.Sprintf("list orders of product %d", id), http.MethodGet, path, nil, &page); err != nil {
			return nil, err
		}
		orders = append(orders, page.Orders...)
		if page.Next == nil || *page.Next <= after {
			return orders, nil
		}
		after = *page.Next
	}
}

// Do sends one request to Base+path with in as its JSON body (none if in
// is nil) and the token on anything but a GET, and decodes a 2xx JSON
// answer into out (unless out is nil). A non-2xx answer is an *Error; op
// names the call in every error.
func (c *Client) Do(ctx context.Context, op, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" && method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s: read answer: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := &Error{Op: op, Status: resp.StatusCode}
		var e struct{ Error, Message string }
		if json.Unmarshal(raw, &e) == nil {
			apiErr.Code, apiErr.Message = e.Error, e.Message
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: answer is not the JSON expected: %w", op, err)
	}
	return nil
}

func productPath(id int64) string { return "/api/v1/products/" + strconv.FormatInt(id, 10) }

func orderPath(id int64) string { return "/api/v1/orders/" + strconv.FormatInt(id, 10) }
