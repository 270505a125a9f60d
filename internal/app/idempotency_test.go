package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// serveHTTP serves srv on a port of its own until the test ends, and
// returns its base URL: the replica as a client meets it.
func serveHTTP(t *testing.T, srv *app.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// answer is an HTTP response as a client reads it.
type answer struct {
	status int
	header http.Header
	body   string
}

// replayed says whether the answer is marked as given again.
func (a answer) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

// code is the "error" of a JSON error body.
func (a answer) code() string {
	var e struct{ Error string }
	_ = json.Unmarshal([]byte(a.body), &e)
	return e.Error
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// send sends one request with a body (none if ""), the Idempotency-Key key
// (none if ""), and the admin token on anything but a GET. It does not
// touch testing.T, so goroutines may use it.
func send(method, url, body, key string) (answer, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: string(b)}, err
}

func must(t *testing.T, method, url, body, key string) answer {
	t.Helper()
	a, err := send(method, url, body, key)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// wantStatus fails unless a has status (and, for an error, code).
func wantStatus(t *testing.T, what string, a answer, status int, code string) {
	t.Helper()
	if a.status != status || a.code() != code {
		t.Fatalf("%s: got %d %s, want %d %s", what, a.status, a.body, status, code)
	}
}

// sameAs fails unless replay repeats first (status, body, content type)
// and is marked as a replay.
func sameAs(t *testing.T, what string, replay, first answer) {
	t.Helper()
	if replay.status != first.status || replay.body != first.body || replay.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Errorf("%s: got %d %s, want the first answer again, %d %s", what, replay.status, replay.body, first.status, first.body)
	}
	if !replay.replayed() || first.replayed() {
		t.Errorf("%s: Idempotent-Replayed %q on the replay and %q on the first answer, want true and none",
			what, replay.header.Get("Idempotent-Replayed"), first.header.Get("Idempotent-Replayed"))
	}
}

// sale is a product as the API shows it and its orders, read from url:
// two equal sales are the same counts and the same orders.
func sale(t *testing.T, url string, product int64) string {
	t.Helper()
	p := must(t, "GET", fmt.Sprintf("%s/api/v1/products/%d", url, product), "", "")
	o := must(t, "GET", fmt.Sprintf("%s/api/v1/products/%d/orders?limit=100", url, product), "", "")
	if p.status != http.StatusOK || o.status != http.StatusOK {
		t.Fatalf("read product %d: got %d %s and %d %s", product, p.status, p.body, o.status, o.body)
	}
	return p.body + "\n" + o.body
}

// orderID is the order's id in an answer {"order": {...}}.
func orderID(t *testing.T, a answer) int64 {
	t.Helper()
	var out struct{ Order struct{ ID int64 } }
	if err := json.Unmarshal([]byte(a.body), &out); err != nil || out.Order.ID == 0 {
		t.Fatalf("no order in %d %s (%v)", a.status, a.body, err)
	}
	return out.Order.ID
}

func user(name string) string { return `{"user_id":"` + name + `"}` }

// Against real servers, two replicas of one database: a purchase, a
// payment and a cancel retried with their key, through the other replica,
// answer the same and change nothing, where the same request without the
// key would buy again or answer otherwise (the controls); the same key
// with another request is refused and changes nothing; an error is
// answered again as it was; another user's equal key is another key.
func TestIdempotencyKeysOnARealServer(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		c := newClusterOn(t, db)
		window := func(cfg *app.Config) { cfg.PayWindow = time.Hour }
		a, b := serveHTTP(t, c.replica(window)), serveHTTP(t, c.replica(window))
		product := func(stock int) int64 {
			t.Helper()
			res := must(t, "POST", a+"/api/v1/products", fmt.Sprintf(`{"name":"phone","stock":%d}`, stock), "")
			var p struct{ ID int64 }
			if err := json.Unmarshal([]byte(res.body), &p); err != nil || res.status != http.StatusCreated {
				t.Fatalf("create product: %d %s", res.status, res.body)
			}
			return p.ID
		}
		purchase := func(url string, id int64) string { return fmt.Sprintf("%s/api/v1/products/%d/purchase", url, id) }
		move := func(url string, id int64, what string) string {
			return fmt.Sprintf("%s/api/v1/orders/%d/%s", url, id, what)
		}
		p, other := product(5), product(5)

		t.Run("purchase", func(t *testing.T) {
			first := must(t, "POST", purchase(a, p), user("alice"), "buy-1")
			wantStatus(t, "purchase", first, http.StatusCreated, "")
			// The buyer changes their mind; a late retry of the purchase
			// must not buy again.
			wantStatus(t, "cancel", must(t, "POST", move(a, orderID(t, first), "cancel"), user("alice"), ""), http.StatusOK, "")
			before, untouched := sale(t, a, p), sale(t, a, other)
			sameAs(t, "the purchase again", must(t, "POST", purchase(b, p), user("alice"), "buy-1"), first)
			wantStatus(t, "the key on another product", must(t, "POST", purchase(b, other), user("alice"), "buy-1"),
				http.StatusUnprocessableEntity, "idempotency_key_reused")
			wantStatus(t, "the key on a payment", must(t, "POST", move(b, orderID(t, first), "pay"), user("alice"), "buy-1"),
				http.StatusUnprocessableEntity, "idempotency_key_reused")
			if after := sale(t, b, p); after != before {
				t.Errorf("the retries changed the sale:\nbefore %s\nafter  %s", before, after)
			}
			if after := sale(t, b, other); after != untouched {
				t.Errorf("the refused request changed the other product:\nbefore %s\nafter  %s", untouched, after)
			}
			// Control: the same retry without the key buys again.
			wantStatus(t, "the purchase again, without the key", must(t, "POST", purchase(b, p), user("alice"), ""), http.StatusCreated, "")
			if after := sale(t, b, p); after == before {
				t.Error("control: the purchase without the key changed nothing either; the test shows nothing")
			}
		})

		t.Run("pay", func(t *testing.T) {
			bought := must(t, "POST", purchase(a, p), user("bob"), "")
			wantStatus(t, "purchase", bought, http.StatusCreated, "")
			id := orderID(t, bought)
			first := must(t, "POST", move(a, id, "pay"), user("bob"), "pay-1")
			wantStatus(t, "pay", first, http.StatusOK, "")
			before := sale(t, a, p)
			sameAs(t, "the payment again", must(t, "POST", move(b, id, "pay"), user("bob"), "pay-1"), first)
			wantStatus(t, "the key on a cancel", must(t, "POST", move(b, id, "cancel"), user("bob"), "pay-1"),
				http.StatusUnprocessableEntity, "idempotency_key_reused")
			if after := sale(t, b, p); after != before {
				t.Errorf("the retries changed the sale:\nbefore %s\nafter  %s", before, after)
			}
			// Control: without the key, the retry learns only that the
			// order is paid, not the answer it missed.
			wantStatus(t, "the payment again, without the key", must(t, "POST", move(b, id, "pay"), user("bob"), ""), http.StatusConflict, "order_paid")
		})

		t.Run("cancel", func(t *testing.T) {
			bought := must(t, "POST", purchase(a, p), user("carol"), "")
			id := orderID(t, bought)
			first := must(t, "POST", move(a, id, "cancel"), user("carol"), "cancel-1")
			wantStatus(t, "cancel", first, http.StatusOK, "")
			// Carol buys again, a new live order; the old cancel's retry
			// must leave it alone.
			wantStatus(t, "buy again", must(t, "POST", purchase(a, p), user("carol"), ""), http.StatusCreated, "")
			before := sale(t, a, p)
			sameAs(t, "the cancel again", must(t, "POST", move(b, id, "cancel"), user("carol"), "cancel-1"), first)
			wantStatus(t, "the key on a payment", must(t, "POST", move(b, id, "pay"), user("carol"), "cancel-1"),
				http.StatusUnprocessableEntity, "idempotency_key_reused")
			if after := sale(t, b, p); after != before {
				t.Errorf("the retries changed the sale:\nbefore %s\nafter  %s", before, after)
			}
			wantStatus(t, "the cancel again, without the key", must(t, "POST", move(b, id, "cancel"), user("carol"), ""), http.StatusConflict, "order_cancelled")
		})

		t.Run("an error is answered again", func(t *testing.T) {
			q := product(0)
			first := must(t, "POST", purchase(a, q), user("dave"), "sold-out-1")
			wantStatus(t, "purchase", first, http.StatusConflict, "sold_out")
			wantStatus(t, "restock", must(t, "PUT", fmt.Sprintf("%s/api/v1/products/%d/stock", a, q), `{"stock":1}`, ""), http.StatusOK, "")
			before := sale(t, a, q)
			sameAs(t, "the purchase again", must(t, "POST", purchase(b, q), user("dave"), "sold-out-1"), first)
			if after := sale(t, b, q); after != before {
				t.Errorf("the retry changed the sale:\nbefore %s\nafter  %s", before, after)
			}
			wantStatus(t, "the purchase again, without the key", must(t, "POST", purchase(b, q), user("dave"), ""), http.StatusCreated, "")
		})

		t.Run("two users' equal keys are two keys", func(t *testing.T) {
			// buy-1 is alice's key for product p; erin's buy-1 is new.
			before := sale(t, a, p)
			res := must(t, "POST", purchase(b, p), user("erin"), "buy-1")
			wantStatus(t, "erin's purchase", res, http.StatusCreated, "")
			if res.replayed() || !strings.Contains(res.body, `"user_id":"erin"`) {
				t.Errorf("erin's purchase with alice's key: got %s (replayed %v), want erin's own order", res.body, res.replayed())
			}
			if sale(t, b, p) == before {
				t.Error("erin's purchase changed nothing")
			}
		})
	})
}

// A retry that arrives while the first attempt is still running, certainly
// so (the first is held inside its purchase), gets 409 request_in_progress
// at another replica and changes nothing; once the first has answered,
// the retry gets its answer. The replica counts the conflict.
func TestIdempotentRetryInFlightOnARealServer(t *testing.T) {
	c := newCluster(t)
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	held := c.replica(func(cfg *app.Config) {
		cfg.PayWindow = time.Hour
		cfg.Chaos = func(context.Context, []int64) { once.Do(func() { close(inside); <-release }) }
	})
	a, b := serveHTTP(t, held), serveHTTP(t, c.replica(func(cfg *app.Config) { cfg.PayWindow = time.Hour }))
	id := createProduct(t, held.Handler(), 3)
	url := fmt.Sprintf("/api/v1/products/%d/purchase", id)

	type result struct {
		a   answer
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		res, err := send("POST", a+url, user("alice"), "k")
		firstDone <- result{res, err}
	}()
	<-inside
	before := sale(t, b, id)
	retry := must(t, "POST", b+url, user("alice"), "k")
	wantStatus(t, "the retry in flight", retry, http.StatusConflict, "request_in_progress")
	if retry.header.Get("Retry-After") == "" {
		t.Error("409 request_in_progress without Retry-After")
	}
	if after := sale(t, b, id); after != before {
		t.Errorf("the retry in flight changed the sale:\nbefore %s\nafter  %s", before, after)
	}
	close(release)
	first := <-firstDone
	if first.err != nil {
		t.Fatal(first.err)
	}
	wantStatus(t, "the first attempt", first.a, http.StatusCreated, "")
	sameAs(t, "the retry after it", must(t, "POST", b+url, user("alice"), "k"), first.a)

	metrics := must(t, "GET", b+"/metrics", "", "")
	for _, want := range []string{`seckill_idempotency_claims_total{result="in_flight"} 1`, `seckill_idempotency_claims_total{result="replay"} 1`} {
		if !strings.Contains(metrics.body, want) {
			t.Errorf("replica b's metrics lack %s", want)
		}
	}
}

// Every replica deletes keys once IDEMPOTENCY_TTL has passed: the key is
// then new again, and takes another request. Until then, that request is
// refused.
func TestIdempotencyKeysExpire(t *testing.T) {
	c := newCluster(t)
	srv := c.replica(func(cfg *app.Config) { cfg.IdempotencyTTL = 200 * time.Millisecond })
	url := serveHTTP(t, srv)
	p, q := createProduct(t, srv.Handler(), 1), createProduct(t, srv.Handler(), 1)
	purchase := func(id int64) string { return fmt.Sprintf("%s/api/v1/products/%d/purchase", url, id) }
	wantStatus(t, "purchase", must(t, "POST", purchase(p), user("alice"), "k"), http.StatusCreated, "")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last answer
	err := poll.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		var err error
		last, err = send("POST", purchase(q), user("alice"), "k")
		if err != nil || last.status == http.StatusUnprocessableEntity {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the key was not forgotten: %v; last answer %d %s", err, last.status, last.body)
	}
	if last.status != http.StatusCreated || last.replayed() {
		t.Errorf("the expired key on another product: got %d %s, want a first 201", last.status, last.body)
	}
}

// A replica frozen between its claim of a key and its answer (here, held
// inside its purchase, its lease running out) holds the key only for the
// in-flight limit, the write timeout: after that a retry at another
// replica takes the key over and runs the purchase, and its answer is the
// one every later retry gets. The frozen replica, when it wakes, changes
// nothing: its write is fenced off, and its answer is not recorded. Alice
// has one order.
func TestIdempotencyKeyOfAFrozenReplicaIsTakenOver(t *testing.T) {
	c := newCluster(t)
	quick := func(cfg *app.Config) {
		cfg.WriteTimeout = time.Second // the in-flight limit
		cfg.LockWait = 200 * time.Millisecond
		cfg.LockTTL, cfg.LockRenew = 300*time.Millisecond, false
	}
	inside, wake := make(chan struct{}), make(chan struct{})
	var frozen, woken sync.Once
	frozenSrv := c.replica(func(cfg *app.Config) {
		quick(cfg)
		cfg.Chaos = func(context.Context, []int64) { frozen.Do(func() { close(inside); <-wake }) }
	})
	other := c.replica(quick)
	a, b := serveHTTP(t, frozenSrv), serveHTTP(t, other)
	t.Cleanup(func() { woken.Do(func() { close(wake) }) }) // before the servers shut down
	id := createProduct(t, other.Handler(), 3)
	url := fmt.Sprintf("/api/v1/products/%d/purchase", id)

	firstDone := make(chan error, 1)
	go func() {
		_, err := send("POST", a+url, user("alice"), "k") // cut off by the write timeout
		firstDone <- err
	}()
	<-inside
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var retry answer
	err := poll.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		var err error
		retry, err = send("POST", b+url, user("alice"), "k")
		return err == nil && retry.status != http.StatusConflict, err
	})
	if err != nil {
		t.Fatalf("the key was not taken over: %v; last answer %d %s", err, retry.status, retry.body)
	}
	wantStatus(t, "the retry that took the key over", retry, http.StatusCreated, "")
	if retry.replayed() {
		t.Error("the takeover's answer is marked as a replay")
	}
	woken.Do(func() { close(wake) })
	<-firstDone
	// The frozen replica's purchase has failed once it counts an answer:
	// its write was fenced off, or its deadline had passed.
	poll.Eventually(t, 10*time.Second, "the frozen replica's answer", func() bool {
		m, err := send("GET", a+"/metrics", "", "")
		return err == nil && strings.Contains(m.body, `route="/api/v1/products/:id/purchase",status="5`)
	})
	sameAs(t, "a retry after the frozen replica woke", must(t, "POST", a+url, user("alice"), "k"), retry)
	orders := allOrders(t, other.Handler(), id)
	if len(orders) != 1 || orders[0].UserID != "alice" {
		t.Errorf("orders: got %+v, want alice's one", orders)
	}
	if m := must(t, "GET", b+"/metrics", "", ""); !strings.Contains(m.body, `seckill_idempotency_claims_total{result="taken_over"} 1`) {
		t.Error("replica b did not count the takeover")
	}
}
