package lock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	l, err := New(c, Options{RecheckInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	q := l.newQueue("res")
	q.arrive(&waiter{ch: make(chan *Lock, 1)}, false)
	ticket := q.sending(register)
	q.attempted(ticket, time.Now(), acquireResult{status: waiting, queued: true, retryIn: time.Minute}, nil, 0)
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

	wait := q.attempted(ticket, sent, acquireResult{status: waiting, queued: true, retryIn: time.Minute}, nil, 0)

	due := q.state == queued && !q.checkAt.After(time.Now())
	q.waiters, q.ticket, q.state = nil, "", free // nothing for Close to withdraw
	l.mu.Unlock()
	if wait != atOnce || !due {
		t.Errorf("after the refresh's reply: wait %v, re-check due %v; want the re-check at once", wait, due)
	}
	_ = l.Close()
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
