// Package handlers is the HTTP API (v1) over the flash-sale service, built
// on Gin. Handlers parse the request, call the service with the request's
// context, map the result to a status code, and write JSON; the rules live
// in internal/seckill. Every route is in routes.go, every error-to-status
// mapping in errors.go.
//
// Its API is for use inside this module only: New takes a Service whose
// methods use internal/seckill's types, which code outside the module can
// neither name nor implement. The HTTP API it serves is the public
// interface.
package handlers

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// Service is what the handlers need from the domain; *seckill.Service
// implements it.
type Service interface {
	CreateProduct(ctx context.Context, name string, stock int64) (*seckill.Product, error)
	Product(ctx context.Context, id int64) (*seckill.Product, error)
	Products(ctx context.Context) ([]*seckill.Product, error)
	Restock(ctx context.Context, id, stock int64) (*seckill.Product, error)
	Purchase(ctx context.Context, productID int64, userID string) (*seckill.Order, error)
	Order(ctx context.Context, id int64) (*seckill.Order, error)
	Pay(ctx context.Context, orderID int64, userID string) (*seckill.Order, error)
	Cancel(ctx context.Context, orderID int64, userID string) (*seckill.Order, error)
	Orders(ctx context.Context, productID int64, q seckill.OrderQuery) (*seckill.OrderList, error)
	Ready(ctx context.Context) error
}

var _ Service = (*seckill.Service)(nil)

// RequestObserver is told about every request once it is answered, to
// count it. route is the matched route's pattern ("/api/v1/products/:id"),
// or "" when no route matched: a label with one value per route, not per
// product.
type RequestObserver interface {
	RequestDone(method, route string, status int, took time.Duration)
}

// Options configure the API.
type Options struct {
	// AdminToken is the bearer token of the admin routes. Required: an
	// empty token would let anyone in.
	AdminToken string

	// Logger gets the request log and unexpected errors. Default: discarded.
	Logger *slog.Logger

	// Metrics serves GET /metrics. Default: an empty page.
	Metrics http.Handler

	// Requests, when set, is told about every request.
	Requests RequestObserver

	// Dashboard serves GET /dashboard and GET /dashboard/data: a page and
	// the JSON it reads. Default: 404, as for any unknown path.
	Dashboard Dashboard

	// Idempotency keeps the Idempotency-Key header's promise on purchase,
	// pay and cancel (idempotency.go).
	Idempotency Idempotency
}

// Dashboard is the live sale page: a static HTML page and the data it
// polls.
type Dashboard interface {
	// Page is the HTML page, a complete document.
	Page() []byte
	// Data is what the page shows as of now, encodable as JSON, with the
	// timeline from the second since on.
	Data(ctx context.Context, since time.Time) (any, error)
}

// IdempotencyStore keeps the records of idempotency keys where every
// replica sees them; *store.Store implements it.
type IdempotencyStore interface {
	// ClaimKey claims c's key for an attempt of its request, or says what
	// holds it (seckill.KeyState).
	ClaimKey(ctx context.Context, c seckill.KeyClaim) (seckill.KeyRecord, error)
	// CompleteKey records the answer of the attempt that holds k; an
	// error matching seckill.ErrKeyLost when it no longer does.
	CompleteKey(ctx context.Context, k seckill.RequestKey, attempt string, r seckill.Reply) error
	// ReleaseKey gives k back, so that a retry runs the request again; an
	// error matching seckill.ErrKeyLost when attempt no longer holds it.
	ReleaseKey(ctx context.Context, k seckill.RequestKey, attempt string) error
}

// IdempotencyObserver is told what each claim of a key found, to count
// replays and conflicts.
type IdempotencyObserver interface {
	KeyClaimed(state seckill.KeyState)
}

// Idempotency configures the Idempotency-Key header.
type Idempotency struct {
	// Store keeps the keys. Without one, a request with the header is
	// refused (501): doing it without the promise the client asked for
	// could do it twice.
	Store IdempotencyStore

	// InFlight is the longest a request can take: an attempt in flight
	// for longer is given up for lost (its replica died), and a retry
	// takes its key over. The request runs with this deadline, so that a
	// live attempt does not outlast its claim. Default: DefaultInFlight.
	InFlight time.Duration

	// Observer, when set, is told what each claim found.
	Observer IdempotencyObserver
}

// DefaultInFlight is Idempotency.InFlight's default.
const DefaultInFlight = time.Minute

// MaxBodyBytes is the largest request body accepted (413 above it). The
// largest valid body is a 200-character name; 64 KiB is generous and still
// bounds what a client can make the server read.
const MaxBodyBytes = 64 << 10

// RetryAfterSeconds is the Retry-After sent with 503 busy: long enough for
// a queue of buyers to drain a little, short enough for a flash sale.
const RetryAfterSeconds = "1"

// api holds what the handlers share.
type api struct {
	svc       Service
	log       *slog.Logger
	token     string
	metrics   http.Handler
	requests  RequestObserver
	dashboard Dashboard
	keys      Idempotency
}

// New returns the API's Gin engine. It panics if opts.AdminToken is empty,
// a wiring mistake that must not reach production silently.
func New(svc Service, opts Options) *gin.Engine {
	if opts.AdminToken == "" {
		panic("handlers: empty AdminToken")
	}
	a := &api{svc: svc, log: opts.Logger, token: opts.AdminToken, metrics: opts.Metrics,
		requests: opts.Requests, dashboard: opts.Dashboard, keys: opts.Idempotency}
	if a.log == nil {
		a.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if a.keys.InFlight <= 0 {
		a.keys.InFlight = DefaultInFlight
	}
	// Release mode: no debug banner or route dump on stdout; our own
	// middleware logs requests through slog instead.
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	// Unknown paths and methods are answered by our JSON handlers, not by
	// redirects or Gin's text/plain bodies.
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.HandleMethodNotAllowed = true
	e.Use(a.countRequests(), a.recoverer(), a.requestLog(), limitBody(MaxBodyBytes))
	a.routes(e)
	return e
}
