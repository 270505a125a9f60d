package subscription

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

// Every goroutine a Subscriber starts has returned once it is closed, and
// every test closes its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collector gathers the payloads one listener is handed.
type collector struct {
	mu  sync.Mutex
	got []string
}

func (c *collector) fn(payload string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, payload)
}

func (c *collector) has(payload string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.got {
		if p == payload {
			return true
		}
	}
	return false
}

func ready(t *testing.T, l *Listener) {
	t.Helper()
	select {
	case <-l.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("the listener was never ready")
	}
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// pubsubClients counts the server's connections in Pub/Sub mode.
func pubsubClients(c *redis.Client) int {
	n := 0
	for _, line := range strings.Split(c.ClientList(context.Background()).Val(), "\n") {
		for _, f := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "P") {
				n++
			}
		}
	}
	return n
}

// One connection serves every listener: a channel is subscribed with its
// first listener and unsubscribed with its last, the connection opens with
// the first listener of all and closes with the last, and each message
// reaches the listeners of its channel, from the moment they are ready.
func TestOneConnectionForEveryListener(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	s := New(srv.Client(), Config{})
	defer s.Close()
	numsub := func(ch string) int64 { return admin.PubSubNumSub(ctx, ch).Val()[ch] }

	var a1, a2, b collector
	l1 := s.Listen("a", a1.fn)
	ready(t, l1)
	l2 := s.Listen("a", a2.fn)
	ready(t, l2)
	lb := s.Listen("b", b.fn)
	ready(t, lb)
	if numsub("a") != 1 || numsub("b") != 1 || pubsubClients(admin) != 1 {
		t.Fatalf("a: %d, b: %d subscriptions on %d connections; want one each, on one connection", numsub("a"), numsub("b"), pubsubClients(admin))
	}
	admin.Publish(ctx, "a", "to a")
	admin.Publish(ctx, "b", "to b")
	eventually(t, "the messages", func() bool { return a1.has("to a") && a2.has("to a") && b.has("to b") })
	if a1.has("to b") || b.has("to a") {
		t.Error("a listener was handed another channel's message")
	}

	l1.Stop()
	admin.Publish(ctx, "a", "after one stopped")
	eventually(t, "the other listener's message", func() bool { return a2.has("after one stopped") })
	if numsub("a") != 1 {
		t.Errorf("a: %d subscriptions with one listener left, want 1", numsub("a"))
	}
	l2.Stop()
	eventually(t, "a to be unsubscribed", func() bool { return numsub("a") == 0 })
	lb.Stop()
	eventually(t, "the connection to close", func() bool { return pubsubClients(admin) == 0 })
	if a1.has("after one stopped") {
		t.Error("a stopped listener was handed a message")
	}

	// A listener after the last one opens the connection again.
	var c collector
	lc := s.Listen("a", c.fn)
	ready(t, lc)
	admin.Publish(ctx, "a", "again")
	eventually(t, "the message on the new connection", func() bool { return c.has("again") })
	lc.Stop()
}

// A channel that loses its last listener and gets a new one before the
// connection's owner has unsubscribed it stays subscribed, and the new
// listener is ready.
func TestChannelKeptThroughAQuickStopAndListen(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	s := New(srv.Client(), Config{})
	defer s.Close()
	keep := s.Listen("keep", func(string) {}) // keeps the connection open
	ready(t, keep)
	for i := range 50 {
		var c collector
		l := s.Listen("churn", c.fn)
		ready(t, l)
		admin.Publish(ctx, "churn", "m")
		eventually(t, "the message", func() bool { return c.has("m") })
		l.Stop()
		_ = i
	}
	keep.Stop()
}

// After Close, a listener is never ready, and Close has waited for every
// goroutine.
func TestListenAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Config{})
	l := s.Listen("a", func(string) {})
	ready(t, l)
	s.Close()
	late := s.Listen("b", func(string) {})
	select {
	case <-late.Ready():
		t.Error("a listener made after Close is ready")
	case <-time.After(50 * time.Millisecond):
	}
	late.Stop()
	l.Stop()
}
