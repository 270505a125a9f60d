package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill-ref/seckill/internal/faultproxy"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start is a proxy in front of a new redis-server, closed when t ends,
// and a client of the server that bypasses the proxy.
func start(t *testing.T) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	s := redistest.Start(t)
	p, err := faultproxy.Start(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close the proxy: %v", err)
		}
	})
	return p, s.Client()
}

// conn is a raw connection through p, closed when t ends.
func conn(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func send(t *testing.T, c net.Conn, cmd string) {
	t.Helper()
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
}

func reply(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read a reply: %v", err)
	}
	return strings.TrimSpace(line)
}

// waitWaiting polls until the proxy holds at least n bytes it has not
// delivered: the bytes sent have reached it and stopped there.
func waitWaiting(t *testing.T, p *faultproxy.Proxy, n int64) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, "the proxy to hold the bytes sent", func() bool { return p.Stats().Waiting >= n })
}

func TestForwardsBothWays(t *testing.T) {
	p, _ := start(t)
	c, r := conn(t, p)
	send(t, c, "PING")
	if got := reply(t, c, r, 10*time.Second); got != "+PONG" {
		t.Fatalf("got %q, want +PONG", got)
	}
	st := p.Stats()
	if st.Connections != 1 || st.Up != 6 || st.Down != 7 || st.Held != 0 || st.Delayed != 0 {
		t.Errorf("stats: got %+v, want 1 connection, 6 bytes up, 7 down, none held or delayed", st)
	}
}

// A partition holds a request until it heals, and then delivers it: the
// server has not seen it before, and runs it after.
func TestPartitionHoldsUntilHeal(t *testing.T) {
	p, direct := start(t)
	ctx := t.Context()
	c, r := conn(t, p)
	send(t, c, "PING") // the upstream connection is open before the cut
	if got := reply(t, c, r, 10*time.Second); got != "+PONG" {
		t.Fatalf("got %q, want +PONG", got)
	}
	p.Partition()
	send(t, c, "SET held 1")
	waitWaiting(t, p, int64(len("SET held 1\r\n")))
	if n, err := direct.Exists(ctx, "held").Result(); err != nil || n != 0 {
		t.Fatalf("during the partition: EXISTS held = %d, %v; want 0: the proxy let the request through", n, err)
	}
	p.Heal()
	if got := reply(t, c, r, 10*time.Second); got != "+OK" {
		t.Fatalf("after the heal: got %q, want +OK", got)
	}
	if st := p.Stats(); st.Held != int64(len("SET held 1\r\n")) || st.Partitions != 1 || st.Waiting != 0 {
		t.Errorf("stats: got %+v, want 12 bytes held, 1 partition, nothing waiting", st)
	}
}

// A connection opened during a partition waits for the heal before the
// proxy connects it upstream; the bytes it sent meanwhile count as held,
// as those of a connection opened before the partition do.
func TestConnectionOpenedDuringPartitionCountsItsBytesHeld(t *testing.T) {
	p, _ := start(t)
	p.Partition()
	c, r := conn(t, p)
	send(t, c, "SET held 1")
	waitWaiting(t, p, int64(len("SET held 1\r\n")))
	p.Heal()
	if got := reply(t, c, r, 10*time.Second); got != "+OK" {
		t.Fatalf("after the heal: got %q, want +OK", got)
	}
	if st := p.Stats(); st.Held != int64(len("SET held 1\r\n")) || st.Waiting != 0 {
		t.Errorf("stats: got %+v, want 12 bytes held, nothing waiting", st)
	}
}

// A client that gives up during a partition and closes its connection has
// still sent its request: it arrives after the heal, as TCP would deliver
// it. A connection opened during the partition reaches the server only
// after it.
func TestRequestArrivesAfterClientGaveUp(t *testing.T) {
	p, direct := start(t)
	ctx := t.Context()
	p.Partition()
	c, _ := conn(t, p)
	send(t, c, "SET late 1")
	waitWaiting(t, p, int64(len("SET late 1\r\n")))
	clients := func() int {
		list, err := direct.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, "\n")
	}
	if n := clients(); n != 1 { // the direct client alone
		t.Fatalf("during the partition the server has %d clients, want 1", n)
	}
	_ = c.Close()
	p.Heal()
	poll.Eventually(t, 10*time.Second, "the late SET to arrive", func() bool {
		n, err := direct.Exists(ctx, "late").Result()
		return err == nil && n == 1
	})
}

// Latency delays each direction: a round trip takes at least twice the
// latency (a lower bound, which no machine speed can break).
func TestLatency(t *testing.T) {
	p, _ := start(t)
	c, r := conn(t, p)
	send(t, c, "PING")
	_ = reply(t, c, r, 10*time.Second)
	const lat = 150 * time.Millisecond
	p.SetLatency(lat)
	start := time.Now()
	send(t, c, "PING")
	if got := reply(t, c, r, 10*time.Second); got != "+PONG" {
		t.Fatalf("got %q, want +PONG", got)
	}
	if took := time.Since(start); took < 2*lat {
		t.Errorf("round trip took %v, want at least %v", took, 2*lat)
	}
	if st := p.Stats(); st.Delayed != 13 {
		t.Errorf("delayed bytes: got %d, want 13 (PING and PONG)", st.Delayed)
	}
	p.SetLatency(0)
	send(t, c, "PING")
	_ = reply(t, c, r, 10*time.Second)
	if st := p.Stats(); st.Delayed != 13 {
		t.Errorf("delayed bytes after the latency was removed: got %d, want still 13", st.Delayed)
	}
}

// Close ends every connection and goroutine (TestMain's goleak checks the
// goroutines), also with bytes held by a partition.
func TestCloseWhilePartitioned(t *testing.T) {
	s := redistest.Start(t)
	p, err := faultproxy.Start(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, r := conn(t, p)
	send(t, c, "PING")
	_ = reply(t, c, r, 10*time.Second)
	p.Partition()
	send(t, c, "PING")
	waitWaiting(t, p, 6)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read after Close: got %v, want the connection closed", err)
	}
}

// Reject resets the open connections and every new one until Heal: the
// client learns at once, instead of waiting out a timeout.
func TestRejectResetsUntilHeal(t *testing.T) {
	p, _ := start(t)
	c, r := conn(t, p)
	send(t, c, "PING")
	_ = reply(t, c, r, 10*time.Second)
	p.Reject()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a rejected connection: got %v, want it reset", err)
	}
	// A connection opened while rejecting is reset: at its first read, or
	// already when the dial completes, if the reset arrived first.
	if c2, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		t.Cleanup(func() { _ = c2.Close() })
		_, _ = c2.Write([]byte("PING\r\n"))
		_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read on a connection opened while rejecting: got %v, want it reset", err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial while rejecting: got %v, want a connection, or ECONNRESET", err)
	}
	p.Heal()
	c3, r3 := conn(t, p)
	send(t, c3, "PING")
	if got := reply(t, c3, r3, 10*time.Second); got != "+PONG" {
		t.Fatalf("after Heal: got %q, want +PONG", got)
	}
	if st := p.Stats(); st.Rejections != 1 || st.Reset < 2 {
		t.Errorf("stats: got %+v, want 1 rejection and at least 2 connections reset", st)
	}
}

// noSyncDelay makes a master send a full sync at once, not after Redis's
// default 5 s wait for more replicas.
var noSyncDelay = []string{"--repl-diskless-sync-delay", "0"}

// replicaThrough starts a redis-server that replicates from the proxy p
// (in front of a master), and waits until it is in sync.
func replicaThrough(t *testing.T, p *faultproxy.Proxy) *redistest.Server {
	t.Helper()
	_, port, _ := net.SplitHostPort(p.Addr())
	r := redistest.Start(t, "--replicaof", "127.0.0.1", port)
	rc := r.Client()
	poll.Eventually(t, 10*time.Second, "the replica to sync through the proxy", func() bool {
		info, err := rc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return r
}

// A named proxy tells which process each connection comes from: this
// test's own, a replica it was told of (also one told of after it
// connected, once its link carries bytes again), and "" for one it was not.
func TestNamesTheProcessOfEachConnection(t *testing.T) {
	skipUnlessNamed(t)
	s := redistest.Start(t, noSyncDelay...)
	var ps faultproxy.Processes
	ps.Set(os.Getpid(), "test")
	p, err := faultproxy.StartNamed(s.Addr(), ps.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, r := conn(t, p)
	send(t, c, "PING")
	if got := reply(t, c, r, 10*time.Second); got != "+PONG" {
		t.Fatalf("got %q, want +PONG", got)
	}
	named := replicaThrough(t, p) // connected before it has a name
	replicaThrough(t, p)          // never named
	if st := p.Stats(); st.Clients["test"] != 1 || st.Clients[""] != 2 {
		t.Fatalf("clients: got %v, want 1 of test and 2 unnamed", st.Clients)
	}
	ps.Set(named.PID(), "replica")
	// A write reaches both replicas through their links; the named one's
	// link is named as it passes.
	send(t, c, "SET k 1")
	if got := reply(t, c, r, 10*time.Second); got != "+OK" {
		t.Fatalf("got %q, want +OK", got)
	}
	poll.Eventually(t, 10*time.Second, "the named replica's link to be named", func() bool { return p.Stats().Clients["replica"] == 1 })
	if st := p.Stats(); st.Clients["test"] != 1 || st.Clients[""] != 1 {
		t.Errorf("clients: got %v, want 1 of test, 1 of replica, 1 unnamed", st.Clients)
	}
}

// PartitionClients holds one process's connections and lets the others
// through: the master's replication stream to the replica waits in the
// proxy (the replica has not got the write) while this test's own
// commands, through the same proxy, are answered; Heal delivers it.
func TestPartitionClientsHoldsOneProcess(t *testing.T) {
	skipUnlessNamed(t)
	m := redistest.Start(t, noSyncDelay...)
	var ps faultproxy.Processes
	ps.Set(os.Getpid(), "test")
	p, err := faultproxy.StartNamed(m.Addr(), ps.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// Named once it is linked, as a process is whose id is known only
	// once it runs.
	r := replicaThrough(t, p)
	ps.Set(r.PID(), "replica")

	p.PartitionClients(func(client string) bool { return client == "replica" })
	c, rd := conn(t, p)
	send(t, c, "SET cut 1")
	if got := reply(t, c, rd, 10*time.Second); got != "+OK" {
		t.Fatalf("this test's SET through the partitioned proxy: got %q, want +OK", got)
	}
	poll.Eventually(t, 10*time.Second, "the proxy to hold the SET on its way to the replica", func() bool {
		return p.Stats().WaitingFor["replica"] >= int64(len("SET cut 1"))
	})
	if n, err := r.Client().Exists(t.Context(), "cut").Result(); err != nil || n != 0 {
		t.Fatalf("during the partition the replica has the key (%d, %v), want it held back", n, err)
	}
	p.Heal()
	poll.Eventually(t, 10*time.Second, "the replica to get the key after the heal", func() bool {
		n, err := r.Client().Exists(t.Context(), "cut").Result()
		return err == nil && n == 1
	})
	if st := p.Stats(); st.WaitingFor["replica"] != 0 || st.WaitingFor["test"] != 0 || st.Held == 0 {
		t.Errorf("stats after the heal: got %+v, want nothing waiting and some bytes held", st)
	}
}

// skipUnlessNamed skips a test that needs connections named by process,
// which Processes can do only from Linux's /proc.
func skipUnlessNamed(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("faultproxy: a connection's process is named from Linux's /proc only; skipped on " + runtime.GOOS)
	}
}
