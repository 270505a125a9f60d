package loadtest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeShop is an in-memory test double of the seckill API, just the
// endpoints the load test uses, so the load tester itself can be tested
// end to end. Several httptest servers may share one shop, like replicas
// sharing a database.
//
// A correct shop runs each purchase under one mutex. A racy shop reads the
// stock, lets go of the mutex, and writes back read-minus-one later: a lost
// update, like the service's "none" lock mode. Its first gateSize purchases
// all read before any of them writes (they wait for each other at a gate),
// so the oversell is certain, not likely; every access is still under the
// mutex, so the race detector has nothing to say.
type fakeShop struct {
	token   string
	racy    bool
	pageCap int // most orders per page, to exercise pagination

	// racyOnly, when set, makes a racy shop racy for that product alone.
	racyOnly int64
	// movesStock makes a purchase of product n take its unit from the
	// stock of product n+1 (when there is one): every product's stock +
	// sold changes, their sum over the products does not.
	movesStock bool

	gate gate

	// onPurchase, when set, runs at the start of every purchase with its
	// 1-based number; tests use it to cancel a run or stall a request.
	onPurchase func(r *http.Request, n int64)
	purchases  atomic.Int64

	// lateRestockAnswer makes a restock read its answer after letting go
	// of the mutex, as a service that reads the product after releasing
	// its lock would: a sale in between makes the answer wrong. The first
	// restock waits for that sale, so that one answer at least is wrong.
	lateRestockAnswer bool
	sales             chan struct{} // a token per sale, for lateRestockAnswer

	// restocked is closed once a restock has set the stock (and, with
	// lateRestockAnswer, forgotten the sales before it).
	restocked   chan struct{}
	restockOnce sync.Once

	// life: with its window set, a purchase reserves (see fakelife_test.go).
	life     fakeLife
	expiring bool // the expiry runs

	mu        sync.Mutex
	products  map[int64]*fakeProduct
	nextID    int64
	nextOrder int64
	orders    map[int64]*Order // by id: the orders to pay and cancel
}

type fakeProduct struct {
	Product
	orders []*Order
	users  map[string]bool // who holds a live order
}

func newFakeShop(racy bool) *fakeShop {
	s := &fakeShop{token: "secret", racy: racy, pageCap: 7, products: map[int64]*fakeProduct{}, sales: make(chan struct{}, 1),
		restocked: make(chan struct{}), orders: map[int64]*Order{}}
	s.gate = gate{waiting: 4, open: make(chan struct{})}
	return s
}

// serve starts one replica of the shop and returns its URL and a counter of
// the purchase requests it received.
func (s *fakeShop) serve(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /api/v1/products", s.create)
	mux.HandleFunc("GET /api/v1/products/{id}", s.get)
	mux.HandleFunc("GET /api/v1/products/{id}/orders", s.list)
	mux.HandleFunc("PUT /api/v1/products/{id}/stock", s.restock)
	mux.HandleFunc("GET /api/v1/products", s.listProducts)
	mux.HandleFunc("POST /api/v1/orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) { s.move(w, r, StatePaid) })
	mux.HandleFunc("POST /api/v1/orders/{id}/cancel", func(w http.ResponseWriter, r *http.Request) { s.move(w, r, StateCancelled) })
	s.startExpiry(t)
	mux.HandleFunc("POST /api/v1/products/{id}/purchase", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		s.purchase(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, &hits
}

func (s *fakeShop) create(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeError(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	var in struct {
		Name  string `json:"name"`
		Stock int64  `json:"stock"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Name == "" || in.Stock < 0 {
		writeError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	s.nextID++
	p := &fakeProduct{Product: Product{ID: s.nextID, Name: in.Name, Stock: in.Stock}, users: map[string]bool{}}
	s.products[p.ID] = p
	out := p.Product
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}

// find returns the product of the path; the caller holds s.mu.
func (s *fakeShop) find(w http.ResponseWriter, r *http.Request) *fakeProduct {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, "invalid_request")
		return nil
	}
	p := s.products[id]
	if p == nil {
		writeError(w, http.StatusNotFound, "not_found")
	}
	return p
}

func (s *fakeShop) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.find(w, r); p != nil {
		s.count(p)
		writeJSON(w, http.StatusOK, p.Product)
	}
}

// list pages by cursor, as the API does: orders with ids above "after".
func (s *fakeShop) list(w http.ResponseWriter, r *http.Request) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	limit = min(max(limit, 1), s.pageCap)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.find(w, r)
	if p == nil {
		return
	}
	page := []Order{}
	for _, o := range p.orders {
		if o.ID > after && len(page) < limit+1 {
			page = append(page, *o)
		}
	}
	var next *int64
	if len(page) > limit {
		page = page[:limit]
		next = &page[limit-1].ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"product_id": p.ID, "orders": page, "next": next})
}

func (s *fakeShop) purchase(w http.ResponseWriter, r *http.Request) {
	var in struct {
		UserID string `json:"user_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.UserID == "" {
		writeError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	// After the body is read: only then does the server watch the connection
	// and end r.Context() when the client goes away.
	if s.onPurchase != nil {
		s.onPurchase(r, s.purchases.Add(1))
	}

	s.mu.Lock()
	p := s.find(w, r)
	if p == nil {
		s.mu.Unlock()
		return
	}
	if p.users[in.UserID] {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "already_purchased")
		return
	}
	if s.life.window > 0 && p.Stock > 0 {
		o := s.reserve(p, in.UserID)
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]Order{"order": o})
		return
	}
	stock := p.Stock
	if stock <= 0 {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "sold_out")
		return
	}
	if s.racy && (s.racyOnly == 0 || s.racyOnly == p.ID) {
		// The lost update: the stock read above is written back later.
		s.mu.Unlock()
		s.gate.wait(r.Context())
		s.mu.Lock()
		if p.users[in.UserID] { // the database's unique index still holds
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "already_purchased")
			return
		}
	}
	p.Stock = stock - 1
	if next := s.products[p.ID+1]; s.movesStock && next != nil {
		p.Stock++
		next.Stock--
	}
	p.users[in.UserID] = true
	s.nextOrder++
	o := Order{ID: s.nextOrder, ProductID: p.ID, UserID: in.UserID, Fence: 0, CreatedAt: time.Now().UTC()}
	p.orders = append(p.orders, &o)
	select { // under the mutex: a restock that drains it sees only later sales
	case s.sales <- struct{}{}:
	default:
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]Order{"order": o})
}

func (s *fakeShop) restock(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeError(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	var in struct {
		Stock *int64 `json:"stock"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Stock == nil || *in.Stock < 0 {
		writeError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	p := s.find(w, r)
	if p == nil {
		s.mu.Unlock()
		return
	}
	p.Stock = *in.Stock
	if s.lateRestockAnswer {
		select { // forget sales before this restock
		case <-s.sales:
		default:
		}
	}
	first := false
	s.restockOnce.Do(func() {
		first = true
		close(s.restocked)
	})
	if s.lateRestockAnswer {
		s.mu.Unlock()
		if first { // the first waits for the next sale, the others take what comes
			select {
			case <-s.sales:
			case <-r.Context().Done():
			}
		}
		s.mu.Lock()
	}
	s.count(p)
	out := p.Product
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// count brings p's sold count up to date: without a window, its orders;
// with one, the shop keeps it as orders move. The caller holds s.mu.
func (s *fakeShop) count(p *fakeProduct) {
	if s.life.window == 0 {
		p.Sold = int64(len(p.orders))
	}
}

// listProducts is GET /api/v1/products.
func (s *fakeShop) listProducts(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Product{}
	for _, p := range s.products {
		s.count(p)
		out = append(out, p.Product)
	}
	writeJSON(w, http.StatusOK, map[string]any{"products": out})
}

// holdFirstPurchaseForRestock makes the shop's first purchase wait until
// a restock has set the stock (or until the request ends), so that a sale
// has a purchase after a restock however fast it would otherwise end: a
// restock that never comes leaves the run without one, which the test then
// reports.
func (s *fakeShop) holdFirstPurchaseForRestock() {
	s.onPurchase = func(r *http.Request, n int64) {
		if n != 1 {
			return
		}
		select {
		case <-s.restocked:
		case <-r.Context().Done():
		}
	}
}

// gate holds its first arrivals until `waiting` of them are there.
type gate struct {
	mu      sync.Mutex
	waiting int
	open    chan struct{}
}

func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	if g.waiting == 0 {
		g.mu.Unlock()
		return
	}
	g.waiting--
	if g.waiting == 0 {
		close(g.open)
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code, "message": code})
}

// closedURL returns the URL of a server that is no longer there.
func closedURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}
