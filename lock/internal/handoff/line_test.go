package handoff

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/backend"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
)

// nopObserver ignores everything.
type nopObserver struct{}

func (nopObserver) Acquired(string, time.Duration, bool)       {}
func (nopObserver) AcquireFailed(string, time.Duration, error) {}
func (nopObserver) Released(string, time.Duration)             {}
func (nopObserver) RenewalFailed(string, error)                {}
func (nopObserver) LeaseLost(string)                           {}

// testLine is a line whose events a test plays by hand, without Redis: the
// test is its driver (spawn starts nothing), and no lease is ever renewed
// (the keeper starts nothing). Re-checks are a minute apart.
func testLine(t *testing.T) *line {
	t.Helper()
	const ttl = 10 * time.Second
	cfg := Config{
		Prefix: "lock:", TTL: ttl, WaitTimeout: 5 * time.Second, RecheckInterval: time.Minute, ClaimLease: ttl,
		Lease:    lease.Config{TTL: ttl, RenewInterval: ttl / 3, BackoffCap: time.Minute, Observer: nopObserver{}},
		Observer: nopObserver{},
	}
	keeper := lease.NewKeeper(context.Background(), cfg.Lease, func(func()) bool { return false })
	t.Cleanup(keeper.Stop)
	e := &shared{cfg: cfg, keeper: keeper, id: "this-process",
		spawn: func(*line) bool { return true }, forget: func(*line) {}}
	return newLine(e, queue.NewKeys("lock:", "res"))
}

// waitAsFirst plays a goroutine that finds the lock held by another
// process and waits, first in line; the driver starts.
func waitAsFirst(t *testing.T, ln *line) *waiter {
	t.Helper()
	if _, try, ok, err := ln.begin(true); !try || !ok || err != nil {
		t.Fatalf("begin on an idle line: try %v, ok %v, %v; want a direct attempt", try, ok, err)
	}
	_, w, _, err := ln.tried(nil, nil, true)
	if w == nil || err != nil {
		t.Fatalf("tried with the lock held: %v, %v; want a waiter", w, err)
	}
	return w
}

// A grant whose claim is too short to hand out asks for a re-check at once
// (line.pass). When that grant comes while the driver's refresh of the
// same ticket is on its way, and the refresh then replies "still waiting"
// (it ran before the grant), the reply must not put the re-check off by a
// whole interval: by then the claim has ended and the grant is lost.
func TestShortClaimDuringRefreshKeepsTheImmediateRecheck(t *testing.T) {
	ln := testLine(t)
	waitAsFirst(t, ln)
	if a, _, _, _ := ln.nextStep(); a != subscribe {
		t.Fatalf("the driver's first step: %v, want subscribe", a)
	}
	ln.listened()
	a, ticket, sent, _ := ln.nextStep()
	if a != join {
		t.Fatalf("the driver's next step: %v, want join", a)
	}
	ln.waited(ticket, sent, backend.Turn{Turn: queue.Turn{Status: queue.Waiting, HeldFor: time.Minute}}, nil, 0)
	ln.mu.Lock()
	if ln.state != queued || ln.ticket != ticket {
		ln.mu.Unlock()
		t.Fatalf("after the join: %v under %q, want queued under %q", ln.state, ln.ticket, ticket)
	}
	ln.checkAt = time.Now() // the re-check is due
	ln.mu.Unlock()
	a, _, rsent, _ := ln.nextStep()
	if a != refresh {
		t.Fatalf("with the re-check due: %v, want refresh", a)
	}
	// The grant message: its claim, counted from before the last call that
	// found the ticket waiting, is nearly over.
	ln.mu.Lock()
	ln.pass(grant{ticket: ticket, token: 1, deadline: time.Now().Add(time.Millisecond), claim: true})
	if !ln.recheckNow || ln.state != joining || len(ln.waiters) != 1 {
		ln.mu.Unlock()
		t.Fatalf("pass: recheckNow %v, %v, %d waiters; want a re-check at once once the refresh returns, and the waiter kept", ln.recheckNow, ln.state, len(ln.waiters))
	}
	ln.mu.Unlock()

	wait := ln.waited(ticket, rsent, backend.Turn{Turn: queue.Turn{Status: queue.Waiting, HeldFor: time.Minute}}, nil, 0)
	ln.mu.Lock()
	due := ln.state == queued && !ln.checkAt.After(time.Now())
	ln.mu.Unlock()
	if wait != atOnce || !due {
		t.Errorf("after the refresh's reply: wait %v, re-check due %v; want the re-check at once", wait, due)
	}
}

// The line's states follow its events: a grant with nobody waiting is
// given up, for the driver to withdraw (which passes the lock on); a
// release that puts the process back in line leaves it queued under that
// ticket, with the re-check ahead; a release whose reply was lost gives
// its ticket up for the driver to withdraw; a grant message for any other
// ticket changes nothing; and a process does not go back in line before
// its driver listens.
func TestLineStates(t *testing.T) {
	held := func(t *testing.T, ln *line) *Hold {
		t.Helper()
		if _, try, _, _ := ln.begin(true); !try {
			t.Fatal("no direct attempt on an idle line")
		}
		h, _, _, err := ln.tried(&grant{ticket: "A", token: 1, deadline: time.Now().Add(time.Minute)}, nil, true)
		if h == nil || err != nil {
			t.Fatalf("tried with the lock won: %v, %v", h, err)
		}
		if w, _, _, _ := ln.begin(true); w == nil {
			t.Fatal("a second goroutine does not wait")
		}
		return h
	}
	ending := lease.Ending{Deadline: time.Now().Add(time.Minute)}

	t.Run("a grant nobody waits for is given up", func(t *testing.T) {
		ln := testLine(t)
		w := waitAsFirst(t, ln)
		ln.mu.Lock()
		ln.state, ln.ticket = queued, "T"
		ln.mu.Unlock()
		if removed, _ := ln.leave(w); !removed {
			t.Fatal("the waiter was not in line")
		}
		ln.mu.Lock()
		ln.pass(grant{ticket: "T", token: 7, deadline: time.Now().Add(time.Minute)})
		st, ticket, withdrawing := ln.state, ln.ticket, ln.withdrawing
		ln.mu.Unlock()
		if st != free || ticket != "" || len(withdrawing) != 1 || withdrawing[0] != "T" {
			t.Fatalf("after a grant with nobody waiting: %v, ticket %q, withdrawing %q; want free, and T to withdraw", st, ticket, withdrawing)
		}
		if a, ticket, _, _ := ln.nextStep(); a != withdraw || ticket != "T" {
			t.Errorf("the driver's next step: %v %q, want the withdraw of T", a, ticket)
		}
	})
	t.Run("a release that puts the process back in line leaves it queued", func(t *testing.T) {
		ln := testLine(t)
		h := held(t, ln)
		ln.driver = listening
		st := ln.releaseBegins(h, ending)
		if ln.state != releasing || st.requeue == "" || ln.ticket != st.requeue {
			t.Fatalf("release with a goroutine waiting: %v, requeue %q, ticket %q; want releasing under a new ticket", ln.state, st.requeue, ln.ticket)
		}
		sent := time.Now()
		ln.releaseEnded(h, sent, true, queue.Released{Released: true, Queued: true}, nil)
		if ln.state != queued || ln.ticket != st.requeue || !ln.checkAt.After(sent) || ln.holder != nil {
			t.Errorf("after the release's reply: %v under %q, re-check at %v; want queued under %q, the re-check ahead", ln.state, ln.ticket, ln.checkAt, st.requeue)
		}
		ln.message(ln.sh.id + " someone-else 9 9")
		if ln.state != queued || ln.ticket != st.requeue {
			t.Errorf("a stale grant message changed the line: %v under %q", ln.state, ln.ticket)
		}
	})
	t.Run("a release whose reply was lost gives its ticket up", func(t *testing.T) {
		ln := testLine(t)
		h := held(t, ln)
		ln.driver = listening
		st := ln.releaseBegins(h, ending)
		ln.releaseEnded(h, time.Now(), false, queue.Released{RequeueLost: true}, nil)
		if ln.state != free || ln.ticket != "" || len(ln.withdrawing) != 1 || ln.withdrawing[0] != st.requeue {
			t.Errorf("after a lost reply: %v, ticket %q, withdrawing %q; want free, and %q to withdraw", ln.state, ln.ticket, ln.withdrawing, st.requeue)
		}
		if a, _, _, _ := ln.nextStep(); a != withdraw {
			t.Errorf("the driver's next step: %v, want the withdraw first", a)
		}
	})
	t.Run("a process does not go back in line before it listens", func(t *testing.T) {
		ln := testLine(t)
		h := held(t, ln)
		ln.driver = subscribing
		if st := ln.releaseBegins(h, ending); st.requeue != "" {
			t.Errorf("a release put the process in line under %q while its driver was still subscribing: a grant to it would reach nobody", st.requeue)
		}
	})
}

func (a action) String() string {
	return [...]string{"stop", "sleep", "withdraw", "subscribe", "join", "refresh"}[a]
}
