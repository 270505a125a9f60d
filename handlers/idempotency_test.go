package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/handlers"
	"github.com/seckill-ref/seckill/internal/seckill"
)

// keyStore is an IdempotencyStore in memory, with the rules of the SQL
// one (store/idempotency.go), plus what a test may want of it: an error
// for the next answer recorded, a function run before it is, and a state
// that the next claim finds regardless.
type keyStore struct {
	mu       sync.Mutex
	keys     map[seckill.RequestKey]*keyRecord
	attempts int
	claims   int

	failComplete error
	onComplete   func()
	force        *seckill.KeyState
}

type keyRecord struct {
	fingerprint, attempt string
	claimedAt            time.Time
	done                 bool
	reply                seckill.Reply
}

func newKeyStore() *keyStore { return &keyStore{keys: map[seckill.RequestKey]*keyRecord{}} }

func (s *keyStore) ClaimKey(_ context.Context, c seckill.KeyClaim) (seckill.KeyRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	s.attempts++
	attempt := strings.Repeat("a", s.attempts)
	r, ok := s.keys[c.RequestKey]
	state := seckill.KeyClaimed
	switch {
	case s.force != nil:
		state, s.force = *s.force, nil
	case !ok:
	case r.fingerprint != c.Fingerprint:
		state = seckill.KeyReused
	case r.done:
		return seckill.KeyRecord{State: seckill.KeyReplay, Reply: r.reply}, nil
	case !r.claimedAt.Before(c.StaleBefore):
		state = seckill.KeyInFlight
	default:
		state = seckill.KeyTakenOver
	}
	if state == seckill.KeyClaimed || state == seckill.KeyTakenOver {
		s.keys[c.RequestKey] = &keyRecord{fingerprint: c.Fingerprint, attempt: attempt, claimedAt: c.At}
		return seckill.KeyRecord{State: state, Attempt: attempt}, nil
	}
	return seckill.KeyRecord{State: state}, nil
}

func (s *keyStore) CompleteKey(_ context.Context, k seckill.RequestKey, attempt string, reply seckill.Reply) error {
	if s.onComplete != nil {
		s.onComplete()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failComplete != nil {
		return s.failComplete
	}
	r, ok := s.keys[k]
	if !ok || r.done || r.attempt != attempt {
		return seckill.ErrKeyLost
	}
	reply.Body = append([]byte(nil), reply.Body...)
	r.done, r.reply = true, reply
	return nil
}

func (s *keyStore) ReleaseKey(_ context.Context, k seckill.RequestKey, attempt string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.keys[k]
	if !ok || r.done || r.attempt != attempt {
		return seckill.ErrKeyLost
	}
	delete(s.keys, k)
	return nil
}

func (s *keyStore) claimCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims
}

// orderService answers purchase, pay and cancel with move, counting the
// calls; everything else is not found.
type orderService struct {
	recordingService
	calls atomic.Int64
	move  func(ctx context.Context, method string, id int64, user string) (*seckill.Order, error)
}

func (s *orderService) do(ctx context.Context, method string, id int64, user string) (*seckill.Order, error) {
	s.calls.Add(1)
	if s.move != nil {
		return s.move(ctx, method, id, user)
	}
	return &seckill.Order{ID: 10 + s.calls.Load(), ProductID: id, UserID: user, State: seckill.OrderPending}, nil
}

func (s *orderService) Purchase(ctx context.Context, id int64, user string) (*seckill.Order, error) {
	return s.do(ctx, "purchase", id, user)
}

func (s *orderService) Pay(ctx context.Context, id int64, user string) (*seckill.Order, error) {
	return s.do(ctx, "pay", id, user)
}

func (s *orderService) Cancel(ctx context.Context, id int64, user string) (*seckill.Order, error) {
	return s.do(ctx, "cancel", id, user)
}

// keyed is an engine over a fresh orderService and keyStore.
type keyed struct {
	t      *testing.T
	svc    *orderService
	keys   *keyStore
	engine *gin.Engine
}

func newKeyed(t *testing.T) *keyed {
	k := &keyed{t: t, svc: &orderService{}, keys: newKeyStore()}
	k.engine = handlers.New(k.svc, handlers.Options{AdminToken: adminToken,
		Idempotency: handlers.Idempotency{Store: k.keys, InFlight: time.Hour}})
	return k
}

// send is one POST with a JSON body and, unless key is "", the header.
func (k *keyed) send(path, body, key string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	k.serve(w, path, body, key)
	return w
}

// serve is send, answering to w.
func (k *keyed) serve(w http.ResponseWriter, path, body, key string) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(handlers.IdempotencyKeyHeader, key)
	}
	k.engine.ServeHTTP(w, req)
}

// errorCode is the "error" of a JSON error body, "" for any other body.
func errorCode(w *httptest.ResponseRecorder) string {
	var e struct{ Error string }
	_ = json.Unmarshal(w.Body.Bytes(), &e)
	return e.Error
}

// sameAnswer fails unless replay repeats first, status and body, and says
// it is a replay (first does not).
func sameAnswer(t *testing.T, first, replay *httptest.ResponseRecorder) {
	t.Helper()
	if replay.Code != first.Code || replay.Body.String() != first.Body.String() {
		t.Errorf("replay: got %d %s, want %d %s", replay.Code, replay.Body, first.Code, first.Body)
	}
	if got := replay.Header().Get(handlers.ReplayedHeader); got != "true" {
		t.Errorf("replay: %s %q, want \"true\"", handlers.ReplayedHeader, got)
	}
	if got := first.Header().Get(handlers.ReplayedHeader); got != "" {
		t.Errorf("first answer: %s %q, want none", handlers.ReplayedHeader, got)
	}
	if got, want := replay.Header().Get("Content-Type"), first.Header().Get("Content-Type"); got != want {
		t.Errorf("replay: Content-Type %q, want %q", got, want)
	}
}

var keyedRoutes = []struct{ name, path string }{
	{"purchase", "/api/v1/products/7/purchase"},
	{"pay", "/api/v1/orders/7/pay"},
	{"cancel", "/api/v1/orders/7/cancel"},
}

// A retry with the key gets the first answer, marked as a replay, and the
// service is not called again; the same key with another request is
// refused, and calls nothing; another user's equal key is another key; no
// key, no promise: every request is done.
func TestIdempotentRetry(t *testing.T) {
	for _, r := range keyedRoutes {
		t.Run(r.name, func(t *testing.T) {
			k := newKeyed(t)
			first := k.send(r.path, `{"user_id":"alice"}`, "k-1")
			if first.Code >= 300 {
				t.Fatalf("first: got %d %s", first.Code, first.Body)
			}
			// The same values, spaced and cased differently: the same
			// request.
			sameAnswer(t, first, k.send(r.path, `{ "USER_ID" : "alice" }`, "k-1"))
			sameAnswer(t, first, k.send(r.path, `{"user_id":"alice"}`, `"k-1"`)) // the draft's sf-string
			if n := k.svc.calls.Load(); n != 1 {
				t.Fatalf("service calls after two retries: got %d, want 1", n)
			}
			// Another product or order, or another route: another request.
			others := []string{strings.Replace(r.path, "/7/", "/8/", 1)}
			for _, o := range keyedRoutes {
				if o.path != r.path {
					others = append(others, o.path)
				}
			}
			for _, path := range others {
				w := k.send(path, `{"user_id":"alice"}`, "k-1")
				if w.Code != http.StatusUnprocessableEntity || errorCode(w) != "idempotency_key_reused" {
					t.Errorf("%s with the key of %s: got %d %s, want 422 idempotency_key_reused", path, r.path, w.Code, w.Body)
				}
			}
			if w := k.send(r.path, `{"user_id":"bob"}`, "k-1"); w.Code != first.Code || w.Header().Get(handlers.ReplayedHeader) != "" {
				t.Errorf("bob with alice's key: got %d %v, want a first answer %d", w.Code, w.Header(), first.Code)
			}
			if n := k.svc.calls.Load(); n != 2 {
				t.Errorf("service calls: got %d, want 2 (alice's once, bob's)", n)
			}
			for range 2 {
				k.send(r.path, `{"user_id":"carol"}`, "")
			}
			if n := k.svc.calls.Load(); n != 4 {
				t.Errorf("service calls: got %d, want 4: without a key every request is done", n)
			}
		})
	}
}

// A malformed key is refused with 400 naming the header, before anything
// is claimed or done.
func TestIdempotencyKeyMalformed(t *testing.T) {
	for _, tt := range []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"empty string", []string{`""`}},
		{"too long", []string{strings.Repeat("k", seckill.MaxKeyLength+1)}},
		{"too long quoted", []string{`"` + strings.Repeat("k", seckill.MaxKeyLength+1) + `"`}},
		{"space", []string{"a b"}},
		{"quote inside", []string{`a"b`}},
		{"unbalanced quote", []string{`"abc`}},
		{"escape", []string{`"a\"b"`}},
		{"backslash", []string{`a\b`}},
		{"non-ASCII", []string{"clé"}},
		{"control", []string{"a\x01b"}},
		{"two lines", []string{"a", "b"}},
		{"a list", []string{`"a", "b"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyed(t)
			req := httptest.NewRequest(http.MethodPost, "/api/v1/products/7/purchase", strings.NewReader(`{"user_id":"alice"}`))
			for _, v := range tt.keys {
				req.Header.Add(handlers.IdempotencyKeyHeader, v)
			}
			w := httptest.NewRecorder()
			k.engine.ServeHTTP(w, req)
			var e struct{ Error, Message string }
			_ = json.Unmarshal(w.Body.Bytes(), &e)
			if w.Code != http.StatusBadRequest || e.Error != "invalid_request" || !strings.HasPrefix(e.Message, handlers.IdempotencyKeyHeader+": ") {
				t.Errorf("got %d %s, want 400 invalid_request naming %s", w.Code, w.Body, handlers.IdempotencyKeyHeader)
			}
			if k.svc.calls.Load() != 0 || k.keys.claimCount() != 0 {
				t.Errorf("service calls %d, claims %d; want none", k.svc.calls.Load(), k.keys.claimCount())
			}
		})
	}
	k := newKeyed(t)
	long := strings.Repeat("k", seckill.MaxKeyLength)
	if w := k.send("/api/v1/products/7/purchase", `{"user_id":"alice"}`, long); w.Code != http.StatusCreated {
		t.Errorf("a key of %d characters: got %d %s, want 201", len(long), w.Code, w.Body)
	}
}

// A request the API refuses before the service (a bad path, body or user)
// claims no key: its scope, the user, is not known to be valid.
func TestIdempotencyInvalidRequestClaimsNothing(t *testing.T) {
	k := newKeyed(t)
	for _, tt := range []struct{ path, body string }{
		{"/api/v1/products/x/purchase", `{"user_id":"alice"}`},
		{"/api/v1/products/7/purchase", `{"user_id":"alice","extra":1}`},
		{"/api/v1/products/7/purchase", `{}`},
		{"/api/v1/orders/7/pay", `{"user_id":"a b"}`},
		{"/api/v1/orders/7/cancel", `{"user_id":"` + strings.Repeat("u", 65) + `"}`},
	} {
		if w := k.send(tt.path, tt.body, "k"); w.Code != http.StatusBadRequest {
			t.Errorf("%s %s: got %d %s, want 400", tt.path, tt.body, w.Code, w.Body)
		}
	}
	if k.keys.claimCount() != 0 || k.svc.calls.Load() != 0 {
		t.Errorf("claims %d, service calls %d; want none", k.keys.claimCount(), k.svc.calls.Load())
	}
}

// The domain's answers are recorded, errors included: a retry of a sold-out
// purchase is sold out, even once the service would sell. Answers that say
// the server failed (503 busy, 500, a panic) are not: the key is given
// back and the retry runs.
func TestIdempotencyWhatIsRecorded(t *testing.T) {
	for _, tt := range []struct {
		name     string
		first    error
		panics   bool
		status   int
		recorded bool
	}{
		{"sold out", seckill.ErrSoldOut, false, http.StatusConflict, true},
		{"already purchased", seckill.ErrAlreadyPurchased, false, http.StatusConflict, true},
		{"not found", seckill.ErrNotFound, false, http.StatusNotFound, true},
		{"not your order", seckill.ErrNotYourOrder, false, http.StatusForbidden, true},
		{"busy", seckill.ErrBusy, false, http.StatusServiceUnavailable, false},
		{"unknown error", errors.New("database is down"), false, http.StatusInternalServerError, false},
		{"panic", nil, true, http.StatusInternalServerError, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyed(t)
			k.svc.move = func(_ context.Context, _ string, id int64, user string) (*seckill.Order, error) {
				if k.svc.calls.Load() > 1 {
					return &seckill.Order{ID: 99, ProductID: id, UserID: user}, nil
				}
				if tt.panics {
					panic("boom")
				}
				return nil, tt.first
			}
			first := k.send("/api/v1/products/7/purchase", `{"user_id":"alice"}`, "k")
			if first.Code != tt.status {
				t.Fatalf("first: got %d %s, want %d", first.Code, first.Body, tt.status)
			}
			retry := k.send("/api/v1/products/7/purchase", `{"user_id":"alice"}`, "k")
			if tt.recorded {
				sameAnswer(t, first, retry)
				if n := k.svc.calls.Load(); n != 1 {
					t.Errorf("service calls: got %d, want 1", n)
				}
				return
			}
			if retry.Code != http.StatusCreated || retry.Header().Get(handlers.ReplayedHeader) != "" {
				t.Errorf("retry: got %d %s, want 201 from a second run", retry.Code, retry.Body)
			}
			if tt.status == http.StatusServiceUnavailable && first.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			// The second run's answer is the one recorded.
			sameAnswer(t, retry, k.send("/api/v1/products/7/purchase", `{"user_id":"alice"}`, "k"))
		})
	}
}

// A retry while the first attempt runs gets 409 request_in_progress with
// Retry-After, and runs nothing; a retry after it gets its answer. The
// first attempt runs with the in-flight deadline; and its answer is
// recorded before the client gets it.
func TestIdempotencyInFlight(t *testing.T) {
	k := newKeyed(t)
	inside, release := make(chan struct{}), make(chan struct{})
	var deadline time.Time
	k.svc.move = func(ctx context.Context, _ string, id int64, user string) (*seckill.Order, error) {
		deadline, _ = ctx.Deadline()
		close(inside)
		<-release
		return &seckill.Order{ID: 1, ProductID: id, UserID: user}, nil
	}
	start := time.Now()
	first := httptest.NewRecorder()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		k.serve(first, "/api/v1/products/7/purchase", `{"user_id":"alice"}`, "k")
	}()
	<-inside
	w := k.send("/api/v1/products/7/purchase", `{"user_id":"alice"}`, "k")
	if w.Code != http.StatusConflict || errorCode(w) != "request_in_progress" || w.Header().Get("Retry-After") == "" {
		t.Errorf("retry in flight: got %d %s %v, want 409 request_in_progress with Retry-After", w.Code, w.Body, w.Header())
	}
	if w := k.send("/api/v1/products/8/purchase", `{"user_id":"alice"}`, "k"); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("another request with the key in flight: got %d %s, want 422", w.Code, w.Body)
	}
	// Run by the first request's goroutine, the one that writes first.
	var sentEarly bool
	k.keys.onComplete = func() { sentEarly = first.Code != http.StatusOK || first.Body.Len() > 0 }
	close(release)
	<-firstDone
	if first.Code != http.StatusCreated {
		t.Fatalf("first: got %d %s", first.Code, first.Body)
	}
	if sentEarly {
		t.Error("the answer was sent before it was recorded")
	}
	sameAnswer(t, first, k.send("/api/v1/products/7/purchase", `{"user_id":"alice"}`, "k"))
	if n := k.svc.calls.Load(); n != 1 {
		t.Errorf("service calls: got %d, want 1", n)
	}
	if lo, hi := start.Add(time.Hour), time.Now().Add(time.Hour); deadline.Before(lo) || deadline.After(hi) {
		t.Errorf("the attempt's deadline: got %v, want the in-flight limit from its claim, in [%v, %v]", deadline, lo, hi)
	}
}

// A key taken over from a lost attempt is held: the retry runs the request
// and its answer is recorded.
func TestIdempotencyTakenOver(t *testing.T) {
	k := newKeyed(t)
	taken := seckill.KeyTakenOver
	k.keys.force = &taken
	first := k.send("/api/v1/orders/7/pay", `{"user_id":"alice"}`, "k")
	if first.Code != http.StatusOK || k.svc.calls.Load() != 1 {
		t.Fatalf("taken over: got %d %s after %d calls, want 200 after 1", first.Code, first.Body, k.svc.calls.Load())
	}
	sameAnswer(t, first, k.send("/api/v1/orders/7/pay", `{"user_id":"alice"}`, "k"))
}

// When the answer cannot be recorded, the client still gets it: the work
// is done.
func TestIdempotencyRecordFails(t *testing.T) {
	k := newKeyed(t)
	k.keys.failComplete = errors.New("database is down")
	if w := k.send("/api/v1/orders/7/cancel", `{"user_id":"alice"}`, "k"); w.Code != http.StatusOK {
		t.Errorf("got %d %s, want 200", w.Code, w.Body)
	}
}

// Without a key store, a request with a key is refused rather than done
// without the promise; one without a key is done.
func TestIdempotencyWithoutStore(t *testing.T) {
	svc := &orderService{}
	engine := handlers.New(svc, handlers.Options{AdminToken: adminToken})
	req := httptest.NewRequest(http.MethodPost, "/api/v1/products/7/purchase", strings.NewReader(`{"user_id":"alice"}`))
	req.Header.Set(handlers.IdempotencyKeyHeader, "k")
	w := httptest.NewRecorder()
	engine.ServeHTTP(w, req)
	if w.Code != http.StatusNotImplemented || errorCode(w) != "idempotency_unsupported" || svc.calls.Load() != 0 {
		t.Errorf("got %d %s after %d calls, want 501 idempotency_unsupported and none", w.Code, w.Body, svc.calls.Load())
	}
}
