package fair

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// nopObserver ignores everything.
type nopObserver struct{}

func (nopObserver) Acquired(string, time.Duration, bool)       {}
func (nopObserver) AcquireFailed(string, time.Duration, error) {}
func (nopObserver) Released(string, time.Duration)             {}
func (nopObserver) RenewalFailed(string, error)                {}
func (nopObserver) LeaseLost(string)                           {}

// lockerWithoutRedis is a Locker whose client is never contacted, with a
// re-check interval of a minute, for tests that play the queue's events
// by hand.
func lockerWithoutRedis(c redis.UniversalClient) *Locker {
	const ttl = 10 * time.Second
	return New(Config{
		Prefix: "lock:", TTL: ttl, WaitTimeout: 5 * time.Second, RecheckInterval: time.Minute, ClaimLease: ttl,
		Lease:    lease.Config{TTL: ttl, RenewInterval: ttl / 3, BackoffCap: time.Minute},
		Observer: nopObserver{},
	}, func(id string, _ func(func())) core.Backend {
		return core.NewSingle(c, core.Config{TTL: ttl, EntryLease: 5 * time.Minute}, id)
	})
}

// A grant whose claim lease is too short to hand out asks for a re-check
// at once (queue.pass). When that grant comes while the driver's refresh
// of the same ticket is on its way, and the refresh then replies "still
// waiting" (it ran before the grant), the reply must not put the re-check
// off by a whole interval: by then the claim lease has ended and the grant
// is lost. No Redis is needed: the test plays the queue's events in the
// order of that race.
func TestShortClaimDuringRefreshKeepsTheImmediateRecheck(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer c.Close()
	l := lockerWithoutRedis(c)
	l.mu.Lock()
	q := newQueue(l, core.NewKeys("lock:", "res"))
	l.queues["res"] = q
	q.arrive(&waiter{ch: make(chan *Hold, 1)}, false)
	ticket := q.sending(register)
	q.attempted(ticket, time.Now(), core.AcquireResult{Status: core.Waiting, Queued: true, RetryIn: time.Minute}, nil, 0)
	if q.state != queued || q.ticket != ticket {
		l.mu.Unlock()
		t.Fatalf("after the registration: %v under %q, want queued under %q", q.state, q.ticket, ticket)
	}
	q.sending(refresh) // the re-check's refresh is on its way
	sent := time.Now()
	// The grant message: its claim lease, counted from before the last
	// call that found the ticket waiting, is nearly over.
	q.pass(grant{ticket: ticket, token: 1, deadline: time.Now().Add(time.Millisecond), claim: true})
	if !q.recheckNow || q.state != registering || len(q.waiters) != 1 {
		l.mu.Unlock()
		t.Fatalf("pass: recheckNow %v, %v, %d waiters; want a re-check at once once the refresh returns, and the waiter kept", q.recheckNow, q.state, len(q.waiters))
	}

	wait, _ := q.attempted(ticket, sent, core.AcquireResult{Status: core.Waiting, Queued: true, RetryIn: time.Minute}, nil, 0)

	due := q.state == queued && !q.checkAt.After(time.Now())
	q.waiters, q.ticket, q.state = nil, "", free // nothing for Close to withdraw
	l.mu.Unlock()
	if wait != atOnce || !due {
		t.Errorf("after the refresh's reply: wait %v, re-check due %v; want the re-check at once", wait, due)
	}
	l.Close()
}

// A grant message names the last token reserved with the granted one; a
// message without it reserves none, and one whose last is below its token
// is refused.
func TestParseGrant(t *testing.T) {
	for _, c := range []struct {
		msg         string
		token, last int64
		ok          bool
	}{
		{"p t 10 13", 10, 13, true},
		{"p t 10", 10, 10, true},
		{"p t 10 9", 0, 0, false},
		{"p t x 13", 0, 0, false},
		{"p t", 0, 0, false},
	} {
		_, _, token, last, ok := parseGrant(c.msg)
		if ok != c.ok || (ok && (token != c.token || last != c.last)) {
			t.Errorf("parseGrant(%q) = %d, %d, %v; want %d, %d, %v", c.msg, token, last, ok, c.token, c.last, c.ok)
		}
	}
}

// queueWithoutRedis is a Locker whose client is never contacted, and a
// queue of it, for tests that play the queue's events by hand. It returns
// with l.mu held, as every event requires; done releases it and closes l,
// which ends a Lock the queue still holds.
func queueWithoutRedis(t *testing.T) (q *queue, done func()) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	l := lockerWithoutRedis(c)
	l.mu.Lock()
	q = newQueue(l, core.NewKeys("lock:", "res"))
	l.queues["res"] = q
	return q, func() {
		q.waiters, q.ticket, q.withdrawing = nil, "", nil // nothing for Close to withdraw
		l.mu.Unlock()
		l.Close()
		_ = c.Close()
	}
}

// The queue's states follow its events: a grant with nobody waiting is
// kept, and the next goroutine to arrive takes it; a release that queues
// the process leaves it queued under that ticket, with the re-check ahead;
// a release whose reply was lost gives the ticket up for the driver to
// withdraw; a grant message for any other ticket changes nothing.
func TestQueueStates(t *testing.T) {
	t.Run("a grant nobody waits for is kept for the next goroutine", func(t *testing.T) {
		q, done := queueWithoutRedis(t)
		defer done()
		q.pass(grant{ticket: "T", token: 7, deadline: time.Now().Add(time.Minute)})
		if q.state != granted || q.ticket != "T" {
			t.Fatalf("after a grant with nobody waiting: %v under %q, want granted under T", q.state, q.ticket)
		}
		w := &waiter{ch: make(chan *Hold, 1)}
		d := q.arrive(w, false)
		if q.state != held || q.ticket != "" || len(q.waiters) != 0 {
			t.Fatalf("after a goroutine arrived: %v, ticket %q, %d waiting; want held, no ticket, none waiting", q.state, q.ticket, len(q.waiters))
		}
		if h := d.h; d.w != w || h != q.holder || h.Token() != 7 || h.Owner() != "T" {
			t.Errorf("the goroutine gets token %d of %q, want the grant's", h.Token(), h.Owner())
		}
	})
	t.Run("a release that queues the process leaves it queued", func(t *testing.T) {
		q, done := queueWithoutRedis(t)
		defer done()
		lk := q.tried(&grant{ticket: "A", token: 1, deadline: time.Now().Add(time.Minute)})
		q.arrive(&waiter{ch: make(chan *Hold, 1)}, false)
		q.driver = listening
		requeue := q.release(lk)
		if q.state != releasing || requeue == "" || q.ticket != requeue {
			t.Fatalf("release with a goroutine waiting: %v, requeue %q, ticket %q; want releasing under a new ticket", q.state, requeue, q.ticket)
		}
		sent := time.Now()
		q.released(lk, requeue, sent, core.ReleaseResult{Released: true, Queued: true}, nil)
		if q.state != queued || q.ticket != requeue || !q.checkAt.After(sent) || q.holder != nil {
			t.Errorf("after the release's reply: %v under %q, re-check at %v; want queued under %q, the re-check ahead", q.state, q.ticket, q.checkAt, requeue)
		}
		q.grantArrived("someone-else", 9, 9)
		if q.state != queued || q.ticket != requeue {
			t.Errorf("a stale grant message changed the queue: %v under %q", q.state, q.ticket)
		}
	})
	t.Run("a release whose reply was lost gives its ticket up", func(t *testing.T) {
		q, done := queueWithoutRedis(t)
		defer done()
		lk := q.tried(&grant{ticket: "A", token: 1, deadline: time.Now().Add(time.Minute)})
		q.arrive(&waiter{ch: make(chan *Hold, 1)}, false)
		q.driver = listening
		requeue := q.release(lk)
		q.released(lk, requeue, time.Now(), core.ReleaseResult{RequeueLost: true}, nil)
		if q.state != free || q.ticket != "" || len(q.withdrawing) != 1 || q.withdrawing[0] != requeue {
			t.Errorf("after a lost reply: %v, ticket %q, withdrawing %q; want free, and %q to withdraw", q.state, q.ticket, q.withdrawing, requeue)
		}
		if a := q.next(); a != withdraw {
			t.Errorf("the driver's next step: %v, want the withdraw first", a)
		}
	})
	t.Run("a process does not queue before it listens", func(t *testing.T) {
		q, done := queueWithoutRedis(t)
		defer done()
		lk := q.tried(&grant{ticket: "A", token: 1, deadline: time.Now().Add(time.Minute)})
		q.arrive(&waiter{ch: make(chan *Hold, 1)}, false)
		q.driver = subscribing
		if requeue := q.release(lk); requeue != "" {
			t.Errorf("a release queued the process under %q while its driver was still subscribing: a grant to it would reach nobody", requeue)
		}
	})
}
