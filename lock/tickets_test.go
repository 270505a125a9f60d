package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// A ticket wins the lock at most once: the owner of a released Lock never
// holds the lock again, and is never queued again. go-redis sends a command
// again when its reply is lost (MaxRetries defaults to 3), and a script run
// twice could break that: a registration that ran, whose reply was lost
// and whose second run comes late, after the ticket was granted, taken and
// released in between, would queue the ticket again and, with nobody else
// queued, grant it the lock with the full TTL, to nobody. The Locker never
// lets go-redis send a registration twice, and withdraws a ticket whose
// call failed. The control lets go-redis retry the lock's script calls:
// the lock is then held by the released Lock's owner.

func TestLostRegistrationReplyNeverRegrantsAReleasedTicket(t *testing.T) {
	t.Parallel()
	if err := lostRegistrationReply(t); err != nil {
		t.Error(err)
	}
}

func TestLostRegistrationReplyControlRetriedCallRegrants(t *testing.T) {
	mustCatch(t, lock.RetryScriptCalls,
		"with the registration retried by go-redis, the check passed: the test would not catch a ticket granted again", lostRegistrationReply)
}

// lostRegistrationReply: h holds the lock; p waits. p's registration (the
// wait script in mode join, ticket T) runs and its reply is lost; a
// request identical to it (go-redis's retry) is held back on the network.
// h then releases: the lock is granted, with a claim lease, to whichever
// ticket p is queued under, and becomes p's Lock L. L's first extension is
// held back too, until L's lease has ended and its key expired: L is
// lost, and released. Only then do the held requests land. It returns what
// is wrong once they have been answered, or nil.
func lostRegistrationReply(t *testing.T) error {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)
	f := &registrationFaults{extension: make(chan struct{}), retry: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			f.letThrough()
		}
	})
	// The held requests' replies come long after they were sent.
	pc := wrappedClient(t, srv, redis.Options{ReadTimeout: time.Minute}, func(conn net.Conn) net.Conn {
		return &faultyConn{inFlight: inFlight{Conn: conn}, f: f}
	})
	// A short lease: whether L came with a claim lease (the grant
	// message) or with the full lease (p's re-check took the grant), it
	// ends soon.
	p := newLockerOn(t, pc, lock.Options{TTL: 2 * time.Second, WaitTimeout: 20 * time.Second})
	h := newLocker(t, srv, lock.Options{})
	lkH := mustAcquire(t, h, "res")

	got := acquireAsync(t, ctx, p, "res")
	queue := lockKey("res") + ":queue"
	// p stands in the queue, under T with its retry on the way, or under
	// a new ticket after giving T up.
	eventually(t, 10*time.Second, "p's registration to be lost, and p to stand in the queue", func() bool {
		ticket := f.ticket()
		return ticket != "" && admin.LLen(ctx, queue).Val() == 1 &&
			(f.retried.Load() || admin.Exists(ctx, lockKey("res")+":tombstone:"+ticket).Val() == 1)
	})
	// p's driver waits for its subscription's confirmation at most one
	// re-check interval before it joins. A grant published before the
	// confirmation is missed and made up for only by the driver's next
	// re-check, which, in the control, waits behind the held retry for
	// longer than p waits for the lock.
	awaitSubscribed(t, admin, "res")
	release(t, lkH) // grants the lock to p
	lk := await(t, got, "p to get the grant")
	if lk == nil {
		t.FailNow()
	}
	await(t, lk.Lost(), "L's lease to run out with its extension held back")
	awaitExpired(t, admin, lockKey("res"), 10*time.Second)
	if err := lk.Release(ctx); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("L.Release = %v, want ErrLeaseLost", err)
	}
	released = true
	f.letThrough()
	eventually(t, 10*time.Second, "the held requests to be answered", func() bool {
		want := int32(1) // the extension
		if f.retried.Load() {
			want++ // and the retried registration
		}
		return f.replied.Load() >= want
	})
	t.Logf("registration of %s: its reply was lost; sent again: %v; L's owner %s", f.ticket(), f.retried.Load(), lk.Owner())
	for _, ticket := range []string{lk.Owner(), f.ticket()} {
		if owner := holder(admin, "res"); owner == ticket {
			return fmt.Errorf("the lock is held by %q, a ticket already granted and released (or withdrawn), for another %v, and nobody will release it",
				owner, admin.PTTL(ctx, lockKey("res")).Val())
		}
		for pid, v := range admin.HGetAll(ctx, lockKey("res")+":waiters").Val() {
			if strings.HasSuffix(v, ticket) {
				return fmt.Errorf("the ticket %q, already granted and released (or withdrawn), is queued again (%s: %s)", ticket, pid, v)
			}
		}
	}
	return nil
}

// registrationFaults are the faults of lostRegistrationReply, applied to
// the requests p writes: the reply to its first registration is lost, and
// a request identical to that registration, and the first extension after
// it, are held back until letThrough.
type registrationFaults struct {
	extension, retry chan struct{} // closed by letThrough

	mu           sync.Mutex
	registration []byte // the first registration, as written
	reg          string // its ticket
	extended     bool
	retried      atomic.Bool  // the registration was sent again
	replied      atomic.Int32 // replies read to held requests
}

func (f *registrationFaults) ticket() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reg
}

// letThrough lets the held requests land.
func (f *registrationFaults) letThrough() {
	close(f.extension)
	close(f.retry)
}

// fault says what to do with the request p: drop its reply, or hold it
// back until gate is closed.
func (f *registrationFaults) fault(p []byte) (dropReply bool, gate <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	script, mode, ticket := lock.ScriptCall(parseCommand(p))
	switch {
	case f.registration == nil && script == "wait" && mode == "join":
		f.registration, f.reg = append([]byte(nil), p...), ticket
		return true, nil
	case f.registration != nil && bytes.Equal(p, f.registration):
		f.retried.Store(true)
		return false, f.retry
	case f.registration != nil && script == "extend" && !f.extended:
		f.extended = true
		return false, f.extension
	}
	return false, nil
}

// faultyConn applies registrationFaults to the requests written on it.
type faultyConn struct {
	inFlight
	f       *registrationFaults
	drop    atomic.Bool
	waiting atomic.Bool // a held request's reply is due
}

func (c *faultyConn) Write(p []byte) (int, error) {
	dropReply, gate := c.f.fault(p)
	if dropReply {
		c.drop.Store(true)
	}
	if gate == nil {
		return c.Conn.Write(p)
	}
	c.waiting.Store(true)
	return c.held(p, gate, nil)
}

func (c *faultyConn) Read(p []byte) (int, error) {
	if !c.drop.Load() {
		n, err := c.Conn.Read(p)
		if n > 0 && c.waiting.CompareAndSwap(true, false) {
			c.f.replied.Add(1)
		}
		return n, err
	}
	return readThenBreak(c.Conn, p)
}

// An uncontended attempt whose reply never came may still run, later. If
// go-redis sent it again and the copy took the lock, the Lock could be
// released before the first copy arrives, which would then take the lock
// for a whole TTL, for nobody: a release leaves no tombstone. The Locker
// never lets go-redis send an attempt twice; it gives the ticket up, so
// that a late run of it fails, and tries again under a new ticket. The
// control lets go-redis retry the attempt: the late copy takes the lock.

func TestLateUncontendedAttemptNeverTakesAReleasedLock(t *testing.T) {
	t.Parallel()
	if err := lateUncontendedAttempt(t); err != nil {
		t.Error(err)
	}
}

func TestLateUncontendedAttemptControlRetriedCallTakesIt(t *testing.T) {
	mustCatch(t, lock.RetryScriptCalls,
		"with the attempt retried by go-redis, the check passed: the test would not catch a late attempt taking the lock", lateUncontendedAttempt)
}

// lateUncontendedAttempt: the first uncontended attempt's request is held
// back 1 s on the network, so its reply does not come within the client's
// 300 ms read timeout. Acquire must still succeed; once its Lock is
// released and the held-back request has run, nobody may hold the lock.
func lateUncontendedAttempt(t *testing.T) error {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	loadScripts(t, admin)
	var armed atomic.Bool
	ran := make(chan struct{})
	c := wrappedClient(t, srv, redis.Options{ReadTimeout: 300 * time.Millisecond}, func(conn net.Conn) net.Conn {
		return &lateAttemptConn{inFlight: inFlight{Conn: conn}, armed: &armed, delay: time.Second, ran: ran}
	})
	l := newLockerOn(t, c, lock.Options{})
	armed.Store(true)
	lk := mustAcquire(t, l, "res")
	release(t, lk)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the held-back attempt never ran: the interleaving was not forced")
	}
	if owner := holder(admin, "res"); owner != "" {
		return fmt.Errorf("after the Lock %q was released, a late attempt took the lock for %q, for another %v, and nobody will release it",
			lk.Owner(), owner, admin.PTTL(ctx, lockKey("res")).Val())
	}
	return nil
}

// lateAttemptConn, once armed, holds the next uncontended acquire written
// on it back by delay, then sends it, reads its reply (it ran) and closes
// ran. Meanwhile the client's read times out and it closes the connection,
// which this defers until then.
type lateAttemptConn struct {
	inFlight
	armed *atomic.Bool
	delay time.Duration
	ran   chan struct{}
}

func (c *lateAttemptConn) Write(p []byte) (int, error) {
	if script, _, _ := lock.ScriptCall(parseCommand(p)); script != "acquire" || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	buf := append([]byte(nil), p...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		time.Sleep(c.delay)
		_ = c.Conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Conn.Write(buf); err != nil {
			return
		}
		if n, err := c.Conn.Read(make([]byte, 512)); err == nil && n > 0 {
			close(c.ran)
		}
	}()
	return len(p), nil
}
