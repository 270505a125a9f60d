package app_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
)

// The HTTP server's timeouts, each with a control that has it long enough
// not to matter: the control passing where the test's assertion would
// fail shows that the assertion sees the timeout.

// serveLoopback runs a replica (no lock, so no Redis needed: the timeouts
// are the HTTP server's) on a loopback port until the test ends, and
// returns its address and handler.
func serveLoopback(t *testing.T, edit func(*app.Config)) (string, http.Handler) {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Lock = app.LockNone
	cfg.Database = filepath.Join(t.TempDir(), "seckill.db")
	cfg.AdminToken = adminToken
	edit(&cfg)
	srv, err := app.NewServer(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = srv.Close()
	})
	return ln.Addr().String(), srv.Handler()
}

// dripResult is what a client that drips its body saw.
type dripResult struct {
	sent     int           // body bytes written before the server answered or closed
	status   int           // the response's status, 0 if none came
	response string        // its first line and body, for messages
	after    time.Duration // from the headers to the answer or the close
}

// dripBody sends a purchase's headers, then its body one byte every
// interval, while reading what the server sends back.
func dripBody(t *testing.T, addr, path, body string, interval time.Duration) dripResult {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A bound for the whole exchange, far above every timeout under test.
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: seckill\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	type answer struct {
		status   int
		response string
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- answer{} // closed without an answer
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{resp.StatusCode, resp.Status + " " + string(b)}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sent := 0
	for {
		select {
		case a := <-answered:
			return dripResult{sent: sent, status: a.status, response: a.response, after: time.Since(start)}
		case <-tick.C:
		}
		if sent < len(body) {
			if _, err := conn.Write([]byte{body[sent]}); err == nil {
				sent++
			}
		}
	}
}

// TestSlowBodyCutOff: a client that sends its headers and then drips its
// body is answered 408 and cut off by READ_TIMEOUT, long before its body
// is complete, and nothing is bought.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	addr, h := serveLoopback(t, func(c *app.Config) { c.ReadTimeout = 300 * time.Millisecond })
	id := createProduct(t, h, 5)
	body := `{"user_id":"slow-0123456789"}` // 29 bytes: 2.9 s at one per 100 ms
	res := dripBody(t, addr, fmt.Sprintf("/api/v1/products/%d/purchase", id), body, 100*time.Millisecond)
	if res.sent >= len(body) {
		t.Fatalf("the whole body went through (%d bytes in %v), answered %q: not cut off", res.sent, res.after, res.response)
	}
	if res.status != http.StatusRequestTimeout || !strings.Contains(res.response, `"error":"request_timeout"`) {
		t.Errorf("answer: got %q, want 408 request_timeout", res.response)
	}
	if p := getProduct(t, h, id); p.Sold != 0 || p.Stock != 5 {
		t.Errorf("product after the cut-off request: %+v, want unchanged", p)
	}
	t.Logf("cut off after %d of %d bytes, %v after the headers (READ_TIMEOUT 300ms)", res.sent, len(body), res.after)
}

// TestSlowBodyControlLongReadTimeout: the same client with a long
// READ_TIMEOUT sends its whole body and buys.
func TestSlowBodyControlLongReadTimeout(t *testing.T) {
	t.Parallel()
	addr, h := serveLoopback(t, func(c *app.Config) { c.ReadTimeout = time.Minute })
	id := createProduct(t, h, 5)
	body := `{"user_id":"slow-0123456789"}`
	res := dripBody(t, addr, fmt.Sprintf("/api/v1/products/%d/purchase", id), body, 100*time.Millisecond)
	if res.sent != len(body) || res.status != http.StatusCreated {
		t.Fatalf("got %d of %d bytes sent, answer %q; want the whole body and 201", res.sent, len(body), res.response)
	}
}

// idleConnection makes one request on a keep-alive connection, then waits
// up to wait for the server to close it; it reports whether it did.
func idleConnection(t *testing.T, addr string, wait time.Duration) (closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: seckill\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("first request: got %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err = r.ReadByte()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err == nil {
		t.Fatal("the server sent bytes on an idle connection")
	}
	return true // io.EOF, or a reset: closed by the server
}

// TestIdleConnectionClosed: a keep-alive connection left idle is closed by
// IDLE_TIMEOUT (300 ms here; the bound of 10 s only stops a hang).
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	addr, _ := serveLoopback(t, func(c *app.Config) { c.IdleTimeout = 300 * time.Millisecond })
	if !idleConnection(t, addr, 10*time.Second) {
		t.Fatal("the idle connection was still open after 10s (IDLE_TIMEOUT 300ms)")
	}
}

// TestIdleConnectionControlLongIdleTimeout: with a long IDLE_TIMEOUT the
// connection is still open after 1.5 s, so the check above can tell.
func TestIdleConnectionControlLongIdleTimeout(t *testing.T) {
	t.Parallel()
	addr, _ := serveLoopback(t, func(c *app.Config) { c.IdleTimeout = time.Minute })
	if idleConnection(t, addr, 1500*time.Millisecond) {
		t.Fatal("the server closed an idle connection with IDLE_TIMEOUT 1m")
	}
}

// slowPurchase buys once through a real connection while the critical
// section lasts hold, and returns the status (0: connection cut without an
// answer).
func slowPurchase(t *testing.T, writeTimeout time.Duration) int {
	t.Helper()
	const hold = 1500 * time.Millisecond
	addr, h := serveLoopback(t, func(c *app.Config) {
		c.LockWait = 100 * time.Millisecond
		c.WriteTimeout = writeTimeout
		c.Chaos = func(ctx context.Context, _ []int64) {
			select {
			case <-time.After(hold):
			case <-ctx.Done():
			}
		}
	})
	id := createProduct(t, h, 5)
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	resp, err := client.Post(fmt.Sprintf("http://%s/api/v1/products/%d/purchase", addr, id), "application/json", strings.NewReader(`{"user_id":"u1"}`))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// TestWriteTimeoutCutsLongRequests: a request that outlasts WRITE_TIMEOUT
// loses its answer; that is why the write timeout must be longer than
// every wait a request may make (Config.Validate), and why its default is
// derived from them. With the derived default the same request is
// answered.
func TestWriteTimeoutCutsLongRequests(t *testing.T) {
	t.Parallel()
	if status := slowPurchase(t, 500*time.Millisecond); status != 0 {
		t.Errorf("WRITE_TIMEOUT 500ms, 1.5s critical section: got %d, want the connection cut", status)
	}
	if status := slowPurchase(t, 0); status != http.StatusCreated {
		t.Errorf("derived WRITE_TIMEOUT, 1.5s critical section: got %d, want 201", status)
	}
}
