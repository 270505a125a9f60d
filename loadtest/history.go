package loadtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// OpKind says what an operation of a history did.
type OpKind string

// Operation kinds.
const (
	// OpCreate is the set-up's creation of the product (POST
	// /api/v1/products): the state the sale starts from.
	OpCreate OpKind = "create"
	// OpRead is GET /api/v1/products/:id: during the sale when reads are
	// mixed in, and the set-up's read of an existing product and the read
	// after the sale always.
	OpRead OpKind = "read"
	// OpPurchase is POST /api/v1/products/:id/purchase.
	OpPurchase OpKind = "purchase"
	// OpRestock is PUT /api/v1/products/:id/stock.
	OpRestock OpKind = "restock"
	// OpPay and OpCancel are POST /api/v1/orders/:id/pay and /cancel, by
	// a buyer with a pending order (Config.Life).
	OpPay    OpKind = "pay"
	OpCancel OpKind = "cancel"
	// OpExpire is not a request: it is one expiry round of the service on
	// one product, rebuilt after the sale from the orders listed (see
	// expiries). Its interval runs from the latest window's end among its
	// orders to when the round recorded them closed.
	OpExpire OpKind = "expire"
)

// OpResult says what the linearizability check makes of an operation.
type OpResult string

// Operation results.
const (
	// ResultOK: a definite answer, held to the model.
	ResultOK OpResult = "ok"
	// ResultNoOp: the operation certainly changed nothing, and is left out
	// of the check: a purchase or restock answered 503 busy or refused
	// with a 4xx other than the purchase's two 409s (see noOp), a request
	// never sent (its connection could not be opened), or a read without
	// an answer (a read changes nothing either way).
	ResultNoOp OpResult = "no-op"
	// ResultAmbiguous: a purchase or restock that may or may not have taken
	// effect (no answer, a 5xx other than busy, an answer that cannot be
	// read). The check keeps it open until the end of the history.
	ResultAmbiguous OpResult = "ambiguous"
)

// Op is one operation of a history: what was asked of which replica, when,
// and what came back. Call and Return are read from the monotonic clock,
// relative to the start of the run (before its set-up); the interval is
// conservative: the request left after Call and its answer was in before
// Return. One JSON object per line in the -history file.
type Op struct {
	Kind    OpKind `json:"kind"`
	Product int64  `json:"product"`
	// Target is the base URL of the replica that was asked.
	Target string `json:"target"`
	// User is the buyer of a purchase, or the one who pays or cancels.
	User string `json:"user,omitempty"`
	// Order is the order a purchase's 201 made (or, settled, the order
	// the listing shows it made), or the order a payment or a cancel
	// moves; 0 when not known. Due is when that order's window ends (its
	// expires_at), on the history's clock, when it has one. Orders are
	// the orders an expiry moved.
	Order  int64          `json:"order,omitempty"`
	Due    *time.Duration `json:"due_ns,omitempty"`
	Orders []int64        `json:"orders,omitempty"`
	// Set is the stock a restock or a create asked for.
	Set *int64 `json:"set,omitempty"`

	Call   time.Duration `json:"call_ns"`
	Return time.Duration `json:"return_ns"`

	// Status is the HTTP status, 0 when no answer came; Code the error
	// code of an error body; Error the transport error.
	Status int    `json:"status"`
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
	// Stock, Reserved and Sold are the product in the answer of a create,
	// a read or a restock.
	Stock    *int64 `json:"stock,omitempty"`
	Reserved *int64 `json:"reserved,omitempty"`
	Sold     *int64 `json:"sold,omitempty"`

	Result OpResult `json:"result"`
	// Settled is what the orders listed after the sale say of an
	// ambiguous purchase (see settle): SettledOrder, SettledNoOrder, or
	// "" when they cannot tell. SettledBy is when the orders had been
	// listed: a purchase SettledOrder took effect before then.
	Settled   string        `json:"settled,omitempty"`
	SettledBy time.Duration `json:"settled_by_ns,omitempty"`
}

// What the orders after the sale say of an ambiguous purchase.
const (
	// SettledOrder: it took effect, at some time after its call: its
	// buyer holds an order that no other request of theirs made.
	SettledOrder = "order"
	// SettledNoOrder: it had no effect the history can see: its buyer
	// holds no order, or one that another request of theirs made (201).
	SettledNoOrder = "no order"
)

// DefaultHistoryLimit bounds the operations a run keeps in memory (some
// 200 bytes each, so about 20 MB). Past it, later operations are counted
// but not kept, and the check answers unknown: a history with operations
// missing cannot be judged.
const DefaultHistoryLimit = 100_000

// history records the operations of one run. It is safe for concurrent
// use: the attack's results and the restocks arrive from two goroutines.
type history struct {
	start time.Time
	limit int

	mu      sync.Mutex
	ops     []Op
	dropped int // operations past the limit
}

func newHistory(start time.Time, limit int) *history {
	return &history{start: start, limit: limit}
}

// since is t on the history's clock.
func (h *history) since(t time.Time) time.Duration { return t.Sub(h.start) }

func (h *history) add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ops) >= h.limit {
		h.dropped++
		return
	}
	h.ops = append(h.ops, op)
}

// snapshot returns the operations kept and how many were not.
func (h *history) snapshot() ([]Op, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...), h.dropped
}

// productOp records a create or a read that answered p.
func (h *history) productOp(kind OpKind, target string, call, ret time.Time, set *int64, p Product) {
	op := Op{Kind: kind, Product: p.ID, Target: target, Set: set, Call: h.since(call), Return: h.since(ret),
		Status: http.StatusOK, Stock: ptr(p.Stock), Reserved: ptr(p.Reserved), Sold: ptr(p.Sold), Result: ResultOK}
	if kind == OpCreate {
		op.Status = http.StatusCreated
	}
	h.add(op)
}

// result records one answer of the attack: a purchase or a read.
func (h *history) result(r *vegeta.Result, targets []string) {
	call := h.since(r.Timestamp)
	op := Op{Product: productOf(r.URL), Target: targetOf(r.URL, targets), Call: call, Return: call + r.Latency, Status: int(r.Code)}
	if r.Code == 0 {
		op.Error = r.Error
		if op.Error == "" {
			op.Error = "no response"
		}
	}
	if isRead(r.URL) {
		op.Kind = OpRead
		op.Result = ResultNoOp
		var p Product
		if r.Code == http.StatusOK && json.Unmarshal(r.Body, &p) == nil {
			op.Stock, op.Reserved, op.Sold, op.Result = ptr(p.Stock), ptr(p.Reserved), ptr(p.Sold), ResultOK
		}
		h.add(op)
		return
	}
	op.Kind = OpPurchase
	op.User, _ = buyerOf(r.URL)
	o := classify(r)
	op.Code = o.code
	if o.created() {
		if made, ok := createdOrder(r.Body); ok {
			op.Order, op.Due = made.ID, h.due(made)
		}
	}
	switch {
	case o.created(), o.code == codeSoldOut && o.status == http.StatusConflict,
		o.code == codeAlreadyPurchased && o.status == http.StatusConflict:
		op.Result = ResultOK
	case noOp(o.status, o.code, op.Error):
		op.Result = ResultNoOp
	default:
		op.Result = ResultAmbiguous
	}
	h.add(op)
}

// restock records one restock that set stock, answered p or failed with
// err, and returns what the check makes of it.
func (h *history) restock(productID int64, target string, call, ret time.Time, stock int64, p Product, err error) OpResult {
	op := Op{Kind: OpRestock, Product: productID, Target: target, Set: ptr(stock), Call: h.since(call), Return: h.since(ret)}
	var apiErr *APIError
	switch {
	case err == nil:
		op.Status, op.Result = http.StatusOK, ResultOK
		op.Stock, op.Reserved, op.Sold = ptr(p.Stock), ptr(p.Reserved), ptr(p.Sold)
	case errors.As(err, &apiErr):
		op.Status, op.Code = apiErr.Status, apiErr.Code
		op.Result = ResultAmbiguous
		if noOp(apiErr.Status, apiErr.Code, "") {
			op.Result = ResultNoOp
		}
	default:
		op.Error = err.Error()
		op.Result = ResultAmbiguous
		if notSent(err) {
			op.Result = ResultNoOp
		}
	}
	h.add(op)
	return op.Result
}

// move records one payment or cancel (kind) of order o by its buyer,
// answered or failed with err, and returns what the check makes of it:
// a definite answer for 200 and the 409s of an order that cannot move, a
// no-op as noOp says, ambiguous otherwise.
func (h *history) move(kind OpKind, o Order, target string, call, ret time.Time, err error) OpResult {
	op := Op{Kind: kind, Product: o.ProductID, Target: target, User: o.UserID, Order: o.ID, Due: h.due(o),
		Call: h.since(call), Return: h.since(ret)}
	var apiErr *APIError
	switch {
	case err == nil:
		op.Status, op.Result = http.StatusOK, ResultOK
	case errors.As(err, &apiErr):
		op.Status, op.Code = apiErr.Status, apiErr.Code
		switch {
		case apiErr.Status == http.StatusConflict && slices.Contains([]string{codeOrderPaid, codeOrderCancelled, codeOrderExpired}, apiErr.Code):
			op.Result = ResultOK
		case noOp(apiErr.Status, apiErr.Code, ""):
			op.Result = ResultNoOp
		default:
			op.Result = ResultAmbiguous
		}
	default:
		op.Error = err.Error()
		op.Result = ResultAmbiguous
		if notSent(err) {
			op.Result = ResultNoOp
		}
	}
	h.add(op)
	return op.Result
}

// purchase records one purchase made outside the attack (the close-out's)
// by user, which answered o or failed with err, and returns what the
// check makes of it, as result does for the attack's.
func (h *history) purchase(productID int64, user, target string, call, ret time.Time, o Order, err error) OpResult {
	op := Op{Kind: OpPurchase, Product: productID, Target: target, User: user, Call: h.since(call), Return: h.since(ret)}
	var apiErr *APIError
	switch {
	case err == nil:
		op.Status, op.Result = http.StatusCreated, ResultOK
		op.Order, op.Due = o.ID, h.due(o)
	case errors.As(err, &apiErr):
		op.Status, op.Code = apiErr.Status, apiErr.Code
		switch {
		case apiErr.Status == http.StatusConflict && (apiErr.Code == codeSoldOut || apiErr.Code == codeAlreadyPurchased):
			op.Result = ResultOK
		case noOp(apiErr.Status, apiErr.Code, ""):
			op.Result = ResultNoOp
		default:
			op.Result = ResultAmbiguous
		}
	default:
		op.Error = err.Error()
		op.Result = ResultAmbiguous
		if notSent(err) {
			op.Result = ResultNoOp
		}
	}
	h.add(op)
	return op.Result
}

// due is when o's window ends, on the history's clock, or nil without
// one. The service stamps it with its clock, which the load test shares
// (one host): the times compare.
func (h *history) due(o Order) *time.Duration {
	if o.ExpiresAt.IsZero() {
		return nil
	}
	return ptr(h.since(o.ExpiresAt))
}

// createdOrder reads the order out of a purchase's 201 answer.
func createdOrder(body []byte) (Order, bool) {
	var out struct {
		Order *Order `json:"order"`
	}
	if json.Unmarshal(body, &out) != nil || out.Order == nil || out.Order.ID == 0 {
		return Order{}, false
	}
	return *out.Order, true
}

// noOp reports whether an answer to a purchase or a restock certainly
// changed nothing, so that the check may leave it out:
//
//   - 503 busy. The service answers busy only for a request that wrote
//     nothing: its wait for the lock (or for its turn in a batch) ended, its
//     product's queue was full, it left the queue before a batch took it,
//     or the fence refused its holder. A refused fence writes nothing by
//     construction: the claim is a conditional update that matched no row,
//     and the fenced write is one transaction (stock, sold and every order
//     of the batch) conditioned on the fence, so it commits whole or not at
//     all, and a batch fails as a whole. In the unfenced modes, busy comes
//     only from the lock's wait, before anything is read or written.
//   - A 4xx other than the purchase's 409s: the API refuses bad input,
//     unknown products and missing tokens without changing anything.
//   - A request that was never sent: its connection could not be opened.
//
// Everything else without a definite answer (no answer, a 5xx other than
// busy, an unexpected status) may have taken effect.
func noOp(status int, code, transportErr string) bool {
	switch {
	case status == http.StatusServiceUnavailable && code == codeBusy:
		return true
	case status >= 400 && status < 500 && status != http.StatusConflict:
		return true
	case status == 0 && strings.Contains(transportErr, notSentMarker):
		return true
	}
	return false
}

// notSentMarker starts the message of a request's error when its
// connection could not be opened (see abortable), so that the history can
// tell it from an error after the request was sent: Vegeta keeps only the
// message.
const notSentMarker = "not sent: "

// notSentError marks a dial error: nothing of the request reached the
// server. net/http retries a POST or PUT only when nothing of it was
// written, so when the last attempt could not connect, no attempt sent it.
type notSentError struct{ err error }

func (e notSentError) Error() string { return notSentMarker + e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// markNotSent wraps err in a notSentError when it is a failure to connect.
func markNotSent(err error) error {
	if notSent(err) {
		return notSentError{err}
	}
	return err
}

// notSent reports whether err is a failure to connect: the request was
// never sent.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// targetOf returns which of targets rawURL was sent to.
func targetOf(rawURL string, targets []string) string {
	for _, t := range targets {
		if strings.HasPrefix(rawURL, t+"/") {
			return t
		}
	}
	return ""
}

// writeHistory writes ops to path, one JSON object per line.
func writeHistory(path string, ops []Op) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadtest: history: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			_ = f.Close()
			return fmt.Errorf("loadtest: history: %w", err)
		}
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("loadtest: history: %w", err)
	}
	return nil
}

// ReadHistory reads a history written with -history (Config.History).
func ReadHistory(r io.Reader) ([]Op, error) {
	var ops []Op
	dec := json.NewDecoder(r)
	for {
		var op Op
		err := dec.Decode(&op)
		if errors.Is(err, io.EOF) {
			return ops, nil
		}
		if err != nil {
			return nil, fmt.Errorf("loadtest: history line %d: %w", len(ops)+1, err)
		}
		ops = append(ops, op)
	}
}

func ptr[T any](v T) *T { return &v }

// initial records the set-up's create of each product, or its read of an
// existing one: the state the sale starts from. Each interval covers that
// product's call.
func (h *history) initial(cfg Config, target string, set []setUpOp) {
	for _, s := range set {
		if cfg.ProductID == 0 {
			h.productOp(OpCreate, target, s.call, s.ret, ptr(cfg.Stock), s.p)
			continue
		}
		h.productOp(OpRead, target, s.call, s.ret, nil, s.p)
	}
}

// createEmpty creates the file at path (if path is set), so that a bad
// path is found before the sale, not after it.
func createEmpty(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// settle tells, where it can, whether each ambiguous purchase took
// effect, from the orders listed after the sale (the API never deletes an
// order, and a purchase writes its order with its stock change). The
// orders of a buyer that no 201 of theirs made (by the id the 201
// answered, or by count when the answers named none) are the orders their
// ambiguous purchases made:
//
//   - None: it did not take effect before the orders were listed, and if
//     it did later, no operation of the history saw it. It counts as a
//     no-op.
//   - One, and no other request of theirs is ambiguous too: this one made
//     it, after its call and before the orders were listed (listed, on the
//     history's clock), and it is that order (Op.Order).
//
// Left open, each such purchase may or may not take effect anywhere after
// its call, and with hundreds of them (a server that timed out under
// load) no search decides; settled, each is a definite sale or nothing.
func settle(ops []Op, orders []Order, listed time.Duration) {
	type buyer struct {
		product int64
		user    string
	}
	made := map[[2]int64]bool{} // product, order: made by a 201
	unnamed, ambiguous := map[buyer]int{}, map[buyer]int{}
	for _, op := range ops {
		if op.Kind != OpPurchase {
			continue
		}
		b := buyer{op.Product, op.User}
		switch {
		case op.Result == ResultOK && op.Status == http.StatusCreated && op.Order != 0:
			made[[2]int64{op.Product, op.Order}] = true
		case op.Result == ResultOK && op.Status == http.StatusCreated:
			unnamed[b]++
		case op.Result == ResultAmbiguous:
			ambiguous[b]++
		}
	}
	others := map[buyer][]Order{} // orders no named 201 made
	for _, o := range orders {
		if !made[[2]int64{o.ProductID, o.ID}] {
			b := buyer{o.ProductID, o.UserID}
			others[b] = append(others[b], o)
		}
	}
	for i := range ops {
		op := &ops[i]
		if op.Kind != OpPurchase || op.Result != ResultAmbiguous {
			continue
		}
		b := buyer{op.Product, op.User}
		left := others[b]
		switch n := len(left) - unnamed[b]; {
		case n <= 0:
			op.Settled = SettledNoOrder
		case n == 1 && ambiguous[b] == 1:
			op.Settled, op.SettledBy = SettledOrder, max(listed, op.Call)
			if unnamed[b] == 0 {
				op.Order = left[0].ID
			}
		}
	}
}

// checkRun settles the ambiguous purchases with the orders listed after
// the sale, writes the history to cfg.History (if set) and checks it for
// linearizability (unless cfg.SkipLinearizability). It returns the check,
// the file written and the error of writing it.
func checkRun(cfg Config, h *history, prefix string, orders []Order, listed time.Time) (Linearizability, string, error) {
	ops, lost := h.snapshot()
	settle(ops, orders, h.since(listed))
	ops = append(ops, expiries(orders, h.start, h.since(listed))...)
	var err error
	if cfg.History != "" {
		err = writeHistory(cfg.History, ops)
	}
	if cfg.SkipLinearizability {
		return Linearizability{}, cfg.History, err
	}
	opts := CheckOptions{Timeout: cfg.CheckTimeout, Incomplete: lost}
	if !cfg.NoVisualization {
		opts.Visualization = cfg.visualizationPath(prefix)
	}
	lin := CheckHistory(ops, opts)
	return lin, cfg.History, err
}

// visualizationPath is where porcupine's visualization goes on a
// violation: Config.Visualization, else next to the history file, else
// next to the plot, else in the temporary directory.
func (cfg Config) visualizationPath(prefix string) string {
	switch {
	case cfg.Visualization != "":
		return cfg.Visualization
	case cfg.History != "":
		return strings.TrimSuffix(cfg.History, filepath.Ext(cfg.History)) + ".html"
	case cfg.Plot != "":
		return filepath.Join(filepath.Dir(cfg.Plot), prefix+"linearizability.html")
	}
	return filepath.Join(os.TempDir(), "seckill-"+prefix+"linearizability.html")
}
