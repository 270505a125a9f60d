package lock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/contention"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// startNodes starts n independent redis-servers.
func startNodes(t *testing.T, n int) []*redistest.Server {
	t.Helper()
	nodes := make([]*redistest.Server, n)
	for i := range nodes {
		nodes[i] = redistest.Start(t)
	}
	return nodes
}

// newRedlock returns a Redlock Locker with its own client per node, as a
// separate process would have. The clients fail fast when a node is down.
func newRedlock(t *testing.T, nodes []*redistest.Server, opts lock.Options) *lock.Locker {
	t.Helper()
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return redlockOver(t, opts, addrs...)
}

func TestRedlockMutualExclusionAndHandOff(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	// The re-check is a minute away: waiters are woken by releases only.
	// The node timeout is generous: this test is about exclusion and
	// hand-off, and a loaded machine answers slowly.
	opts := lock.Options{RecheckInterval: time.Minute, WaitTimeout: 20 * time.Second, NodeTimeout: 500 * time.Millisecond}
	lockers := []*lock.Locker{newRedlock(t, nodes, opts), newRedlock(t, nodes, opts)}
	var holders, maxHolders atomic.Int64
	var mu sync.Mutex
	var last int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				lk, err := lockers[g%2].Acquire(context.Background(), "res")
				if err != nil {
					t.Error(err)
					return
				}
				if n := holders.Add(1); n > maxHolders.Load() {
					maxHolders.Store(n)
				}
				mu.Lock()
				if lk.Token() <= last {
					t.Errorf("token %d after %d", lk.Token(), last)
				}
				last = lk.Token()
				mu.Unlock()
				holders.Add(-1)
				if err := lk.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if m := maxHolders.Load(); m != 1 {
		t.Fatalf("%d holders at once, want 1", m)
	}
}

// A minority of nodes down: the lock works. A majority down: it refuses,
// and says why. Back up: it works again.
func TestRedlockNeedsAQuorum(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	// Killed nodes refuse at once; the live ones may answer slowly on a
	// loaded machine, and must still count.
	l := newRedlock(t, nodes, lock.Options{WaitTimeout: 2 * time.Second, NodeTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	lk := mustAcquire(t, l, "res")
	release(t, lk)

	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	lk = mustAcquire(t, l, "res")
	release(t, lk)

	if err := nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if lk, err := l.Acquire(ctx, "res"); err == nil {
		_ = lk.Release(ctx)
		t.Fatal("acquired with 1 of 3 nodes up")
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	// Nothing was left behind on the one live node.
	if n := nodes[2].Client().Exists(ctx, lockKey("res")).Val(); n != 0 {
		t.Fatal("a failed attempt left its lock on the live node")
	}

	for _, n := range nodes[:2] {
		if err := n.Server.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lk = mustAcquire(t, l, "res")
	release(t, lk)
}

// Tokens keep increasing while a minority of nodes restarts without
// persistence between acquisitions.
func TestRedlockTokensAcrossNodeRestarts(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	l := newRedlock(t, nodes, lock.Options{NodeTimeout: 500 * time.Millisecond}) // slow answers still count
	var last int64
	for round := range 6 {
		for range 50 {
			lk := mustAcquire(t, l, "fenced")
			if lk.Token() <= last {
				t.Fatalf("round %d: token %d after %d", round, lk.Token(), last)
			}
			last = lk.Token()
			release(t, lk)
		}
		nodes[round%3].Restart()
	}
}

// The holder raises the fence counter of its whole quorum to the largest
// token it was given. Here one node's counter is far ahead (it issued a
// large token); once that node is gone, the other two must still issue
// larger tokens. Without the raise, they would go back to their clocks.
func TestRedlockRaisesTheQuorumsFence(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	// A node timeout that a loaded machine's first dial and script load
	// cannot exceed: this test is about tokens. The killed node refuses
	// connections at once.
	l := newRedlock(t, nodes, lock.Options{NodeTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	ahead := time.Now().Add(1000 * time.Hour).UnixMicro()
	nodes[0].Client().Set(ctx, lockKey("res")+":fence", ahead, 0)

	lk := mustAcquire(t, l, "res")
	if lk.Token() <= ahead {
		t.Fatalf("token %d, want above node 0's %d (the largest of the quorum)", lk.Token(), ahead)
	}
	first := lk.Token()
	release(t, lk)
	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	lk = mustAcquire(t, l, "res")
	defer release(t, lk)
	if lk.Token() <= first {
		t.Fatalf("without node 0: token %d after %d; the quorum's fence was not raised", lk.Token(), first)
	}
}

// A node that stops answering (SIGSTOP: connections open, no replies)
// costs NodeTimeout, not the lease.
func TestRedlockFrozenNodeCostsOnlyTheNodeTimeout(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	const nodeTimeout = 50 * time.Millisecond
	l := newRedlock(t, nodes, lock.Options{NodeTimeout: nodeTimeout, TTL: 2 * time.Second})
	warm := mustAcquire(t, l, "warm") // connections to every node are open
	release(t, warm)
	nodes[2].Freeze()
	defer func() { _ = nodes[2].Resume() }()

	start := time.Now()
	lk := mustAcquire(t, l, "res")
	took := time.Since(start)
	if took > 20*nodeTimeout {
		t.Errorf("acquire with a frozen node took %v", took)
	}
	// The lease the Lock vouches for starts before the attempt and is cut
	// by the drift: it cannot outlast what the nodes granted.
	if d := time.Until(lk.Deadline()); d > 2*time.Second-2*time.Second/100 {
		t.Errorf("deadline %v away, want at most TTL minus drift", d)
	}
	release(t, lk)
}

// Losing the quorum while holding is a lost lease, reported through Lost.
func TestRedlockLostQuorumIsReported(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	const ttl = 300 * time.Millisecond
	// The killed nodes refuse connections at once; NodeTimeout only bounds
	// the acquisition, which a loaded machine can slow past 20 ms.
	l := newRedlock(t, nodes, lock.Options{TTL: ttl, NodeTimeout: 100 * time.Millisecond})
	lk := mustAcquire(t, l, "res")
	for _, n := range nodes[:2] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-lk.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("lease not reported lost after the quorum went away")
	}
	if !errors.Is(lk.Err(), lock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", lk.Err())
	}
	_ = lk.Release(context.Background())
}

// Replica acknowledgement: with WaitReplicas, an acquisition counts only
// once a replica has it; without one, it fails and leaves nothing behind.
func TestWaitReplicasAcknowledgement(t *testing.T) {
	t.Parallel()
	// No 5 s pause before the first (diskless) sync to the replica.
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	mc := master.Client()
	ctx := context.Background()
	// Synced: a write on this connection is acknowledged by the replica
	// (WAIT counts replicas that have the connection's last write).
	eventually(t, 10*time.Second, "the replica to sync", func() bool {
		pipe := mc.Pipeline()
		pipe.Set(ctx, "probe", "1", 0)
		acks := pipe.Do(ctx, "WAIT", 1, 100)
		_, err := pipe.Exec(ctx)
		return err == nil && acks.Val() == int64(1)
	})
	// The acknowledged acquisition has 10 s to be acknowledged, so that a
	// busy machine's slow replica does not fail it; the refused one waits
	// out its timeout, so that one is short.
	patient := newLocker(t, master, lock.Options{WaitReplicas: 1, WaitReplicasTimeout: 10 * time.Second})
	l := newLocker(t, master, lock.Options{WaitReplicas: 1, WaitReplicasTimeout: 200 * time.Millisecond})

	lk := mustAcquire(t, patient, "res")
	if got := holder(replica.Client(), "res"); got != lk.Owner() {
		t.Fatalf("replica has %q right after Acquire, want the owner %q", got, lk.Owner())
	}
	release(t, lk)

	// The replica stops acknowledging.
	replica.Freeze()
	defer func() { _ = replica.Resume() }()
	_, err := l.Acquire(ctx, "res")
	if !errors.Is(err, lock.ErrNotReplicated) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire without an acknowledging replica = %v, want ErrNotReplicated", err)
	}
	if n := mc.Exists(ctx, lockKey("res")).Val(); n != 0 {
		t.Fatal("the unacknowledged lock was not released")
	}
}

// A failed Redlock attempt is withdrawn on every node once: the backend's
// acquire has already undone it everywhere, so the Locker adds no second
// round of withdraws. The live node sees two script calls: the attempt and
// its one withdraw.
func TestRedlockFailedAttemptGivesItsTicketUpOnce(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	l := newRedlock(t, nodes, lock.Options{WaitTimeout: 2 * time.Second, NodeTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	release(t, mustAcquire(t, l, "res")) // loads the scripts on every node
	for _, n := range nodes[:2] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	admin := nodes[2].Client()
	before, err := contention.Snapshot(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if lk, err := l.Acquire(ctx, "res"); err == nil {
		_ = lk.Release(ctx)
		t.Fatal("acquired with 1 of 3 nodes up")
	}
	after, err := contention.Snapshot(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	got := after.Sub(before).ByName
	if calls := got["evalsha"] + got["eval"]; calls != 2 {
		t.Errorf("script calls on the live node for one failed attempt: got %d (%v), want 2: the attempt and one withdraw", calls, got)
	}
}

// blackHole listens on a loopback port, accepts connections and reads
// them, and never answers: a node behind a partition that drops packets
// one way, which neither refuses a connection nor closes it. It reports
// how many bytes it swallowed, and closes everything when the test ends.
func blackHole(t *testing.T) (addr string, swallowed *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	swallowed = new(atomic.Int64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					swallowed.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), swallowed
}

// A node that takes connections and never answers (partitioned, not
// down) must cost each call no more than the node timeout: a process
// that waits for the lock gets it once the holder releases on the other
// two nodes. Its subscription to that node's grant channel cannot even
// finish its handshake, which must hold up neither the wait nor the
// other nodes' subscriptions.
func TestRedlockWaitsPastAPartitionedNode(t *testing.T) {
	skipInShort(t, shortMultiNodes)
	t.Cleanup(lock.SetHealthInterval(500 * time.Millisecond)) // Close waits for a handshake at most this long
	nodes := startNodes(t, 2)
	hole, swallowed := blackHole(t)
	// b is woken within milliseconds of a's release; with its calls stuck
	// behind the partitioned node's handshake it waited 15 s and more.
	opts := lock.Options{WaitTimeout: 5 * time.Second}
	a := redlockOver(t, opts, nodes[0].Addr(), nodes[1].Addr(), hole)
	b := redlockOver(t, opts, nodes[0].Addr(), nodes[1].Addr(), hole)
	lk := mustAcquire(t, a, "res")
	got := make(chan error, 1)
	go func() {
		lkB, err := b.Acquire(context.Background(), "res")
		if err == nil {
			err = lkB.Release(context.Background())
		}
		got <- err
	}()
	waitQueued(t, b, "res", 1)
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := await(t, got, "b to acquire after a released"); err != nil {
		t.Errorf("b, waiting while a node is partitioned: %v", err)
	}
	if swallowed.Load() == 0 {
		t.Error("fault not injected: the partitioned node never got a byte")
	}
}
