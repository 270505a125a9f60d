package lock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// roundTrips is a go-redis hook that counts the scripts a client runs
// (EVALSHA, EVAL): those sent one at a time, and the pipelines that carry
// them, with the scripts in them. A new connection's own set-up (HELLO,
// CLIENT SETINFO) is not counted.
type roundTrips struct {
	mu                       sync.Mutex
	single, pipelines, piped int
}

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			r.mu.Lock()
			r.single++
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if isScript(cmd) {
				n++
			}
		}
		if n > 0 {
			r.mu.Lock()
			r.pipelines++
			r.piped += n
			r.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// reset returns the counts so far and starts again from zero.
func (r *roundTrips) reset() (single, pipelines, piped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	single, pipelines, piped = r.single, r.pipelines, r.piped
	r.single, r.pipelines, r.piped = 0, 0, 0
	return single, pipelines, piped
}

// TryAcquireAll takes the free locks and refuses the held ones, sending
// every attempt in one pipeline; ReleaseAll frees them in one more. A lock
// held by another process, one this Locker already holds, and a name
// asked twice are each refused without disturbing the others.
func TestTryAcquireAllAndReleaseAllInOneRoundTripEach(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	other := newLocker(t, srv, lock.Options{})
	held := mustAcquire(t, other, "b")
	defer release(t, held)

	var trips roundTrips
	c := srv.Client()
	loadScripts(t, c) // no EVALSHA comes back NOSCRIPT, to be sent again
	c.AddHook(&trips)
	l := newLockerOn(t, c, lock.Options{})
	mine := mustAcquire(t, l, "d")
	defer release(t, mine)
	trips.reset()

	names := []string{"a", "b", "c", "a", "d"}
	locks, errs := l.TryAcquireAll(ctx, names)
	single, pipelines, piped := trips.reset()
	if single != 0 || pipelines != 1 || piped != 3 {
		t.Errorf("TryAcquireAll sent %d commands alone and %d pipelines of %d commands, want one pipeline of 3 (a, b, c)", single, pipelines, piped)
	}
	for i, want := range []bool{true, false, true, false, false} {
		if got := locks[i] != nil; got != want || (errs[i] == nil) != want {
			t.Errorf("%s (#%d): got lock %v, error %v; want a lock: %v", names[i], i, got, errs[i], want)
		}
		if !want && !errors.Is(errs[i], lock.ErrNotAcquired) {
			t.Errorf("%s (#%d): got %v, want ErrNotAcquired", names[i], i, errs[i])
		}
	}
	a, cc := locks[0], locks[2]
	for _, lk := range []*lock.Lock{a, cc} {
		if got := holder(srv.Client(), lk.Name()); got != lk.Owner() {
			t.Errorf("Redis holds %q for %q, want the Lock's owner %q", lk.Name(), got, lk.Owner())
		}
	}
	// The tokens are each lock's own, larger than any the name had.
	if a.Token() <= 0 || cc.Token() <= 0 {
		t.Errorf("tokens %d and %d, want positive", a.Token(), cc.Token())
	}

	errs = l.ReleaseAll(ctx, []*lock.Lock{a, cc})
	single, pipelines, piped = trips.reset()
	if single != 0 || pipelines != 1 || piped != 2 {
		t.Errorf("ReleaseAll sent %d commands alone and %d pipelines of %d commands, want one pipeline of 2", single, pipelines, piped)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("ReleaseAll: %v", err)
	}
	for _, name := range []string{"a", "c"} {
		if n := srv.Client().Exists(ctx, lockKey(name)).Val(); n != 0 {
			t.Errorf("%s is still locked after ReleaseAll", name)
		}
	}
	// Released, the names can be taken again; a second release is refused.
	if errs := l.ReleaseAll(ctx, []*lock.Lock{a}); !errors.Is(errs[0], lock.ErrNotHeld) {
		t.Errorf("second ReleaseAll: got %v, want ErrNotHeld", errs[0])
	}
	again := mustAcquire(t, other, "a")
	if again.Token() <= a.Token() {
		t.Errorf("the next token of a is %d, not above %d", again.Token(), a.Token())
	}
	release(t, again)
}

// ReleaseAll reports each Lock as Release would: one whose key Redis lost
// while it was held gets ErrLeaseLost and Lost closes, the others nil.
func TestReleaseAllReportsEachLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	l := newLocker(t, srv, lock.Options{})
	locks, errs := l.TryAcquireAll(ctx, []string{"kept", "gone"})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client().Del(ctx, lockKey("gone")).Err(); err != nil {
		t.Fatal(err)
	}
	errs = l.ReleaseAll(ctx, locks)
	if errs[0] != nil || !errors.Is(errs[1], lock.ErrLeaseLost) {
		t.Fatalf("ReleaseAll: got %v and %v, want nil and ErrLeaseLost", errs[0], errs[1])
	}
	select {
	case <-locks[1].Lost():
	default:
		t.Error("Lost is not closed for the Lock whose key was gone")
	}
}

// A pipeline that gets no reply fails every attempt in it, each as an
// error of its own, and leaves no lock behind: the attempts' tickets are
// withdrawn, so a late run of the scripts takes nothing.
func TestTryAcquireAllWithoutAReplyTakesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	var broken sync.Once
	var armed atomic.Bool
	c := wrappedClient(t, srv, redis.Options{}, func(conn net.Conn) net.Conn {
		return breakAfterScripts{Conn: conn, armed: &armed, sent: new(atomic.Bool), once: &broken}
	})
	loadScripts(t, c)
	l := newLockerOn(t, c, lock.Options{})
	armed.Store(true)
	locks, errs := l.TryAcquireAll(ctx, []string{"x", "y"})
	for i, lk := range locks {
		if lk != nil || !errors.Is(errs[i], lock.ErrNotAcquired) {
			t.Errorf("attempt %d: got %v, %v; want no lock and ErrNotAcquired", i, lk, errs[i])
		}
	}
	eventually(t, 5*time.Second, "no lock left behind", func() bool {
		return srv.Client().Exists(ctx, lockKey("x"), lockKey("y")).Val() == 0
	})
	// Nothing of this process is left holding or awaiting them.
	locks, errs = l.TryAcquireAll(ctx, []string{"x", "y"})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("after the failure: %v", err)
	}
	for _, err := range l.ReleaseAll(ctx, locks) {
		if err != nil {
			t.Error(err)
		}
	}
}

// breakAfterScripts loses the replies to the first scripts it carries
// once armed: it waits for them, so the scripts ran, drops them and cuts
// the connection.
type breakAfterScripts struct {
	net.Conn
	armed *atomic.Bool
	sent  *atomic.Bool // scripts went out on this connection, their replies not yet read
	once  *sync.Once
}

func (b breakAfterScripts) Write(p []byte) (int, error) {
	if b.armed.Load() && bytes.Contains(bytes.ToLower(p), []byte("evalsha")) {
		b.sent.Store(true)
	}
	return b.Conn.Write(p)
}

func (b breakAfterScripts) Read(p []byte) (int, error) {
	failed := false
	if b.sent.Load() {
		b.once.Do(func() {
			failed = true
			_, _ = b.Conn.Read(p)
			_ = b.Conn.Close()
		})
	}
	if failed {
		return 0, errors.New("connection cut by the test")
	}
	return b.Conn.Read(p)
}

// Over Redis Cluster the names fall in different slots, on different
// masters: TryAcquireAll and ReleaseAll send one pipeline to each.
func TestTryAcquireAllAcrossClusterSlots(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	l := newLockerOn(t, c, lock.Options{})
	names := []string{"p:1", "p:2", "p:3", "p:4", "p:5", "p:6", "p:7", "p:8"}
	slots := map[int64]bool{}
	for _, n := range names {
		slots[c.ClusterKeySlot(ctx, n).Val()/(16384/3+1)] = true
	}
	if len(slots) < 2 {
		t.Fatalf("the names fall on %d master(s), want several", len(slots))
	}
	locks, errs := l.TryAcquireAll(ctx, names)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, lk := range locks {
		if got := holder(c, lk.Name()); got != lk.Owner() {
			t.Errorf("%s is held by %q, want %q", lk.Name(), got, lk.Owner())
		}
	}
	if err := errors.Join(l.ReleaseAll(ctx, locks)...); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if c.Exists(ctx, lockKey(n)).Val() != 0 {
			t.Errorf("%s still locked", n)
		}
	}
}

// On Redlock each lock is a quorum of its own: TryAcquireAll takes the
// free ones on a majority of the nodes and refuses the held.
func TestTryAcquireAllOnRedlock(t *testing.T) {
	t.Parallel()
	skipInShort(t, shortMultiNodes)
	nodes := startNodes(t, 3)
	opts := lock.Options{NodeTimeout: 500 * time.Millisecond}
	a, b := newRedlock(t, nodes, opts), newRedlock(t, nodes, opts)
	ctx := context.Background()
	held := mustAcquire(t, a, "n:2")
	defer release(t, held)
	locks, errs := b.TryAcquireAll(ctx, []string{"n:1", "n:2", "n:3"})
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], lock.ErrNotAcquired) {
		t.Fatalf("got %v, want n:1 and n:3 taken, n:2 refused", errs)
	}
	if err := errors.Join(b.ReleaseAll(ctx, []*lock.Lock{locks[0], locks[2]})...); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if k := n.Client().Exists(ctx, lockKey("n:1"), lockKey("n:3")).Val(); k != 0 {
			t.Errorf("node %s still holds %d of the released locks", n.Addr(), k)
		}
	}
}

// After Close, TryAcquireAll takes nothing.
func TestTryAcquireAllAfterClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := lock.New(srv.Client(), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	locks, errs := l.TryAcquireAll(context.Background(), []string{"a"})
	if locks[0] != nil || !errors.Is(errs[0], lock.ErrClosed) {
		t.Fatalf("got %v, %v; want ErrClosed", locks[0], errs[0])
	}
}
