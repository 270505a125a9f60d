package seckill

import (
	"context"
	"errors"
	"slices"
	"testing"
)

type testCall struct {
	seat[string]
	name string
}

func newTestCall(name string) *testCall { return &testCall{seat: newSeat[string](), name: name} }

// turnNow returns the turn c has been given; it fails the test if c has
// none yet. Every send in a line happens before the call that makes it
// returns, so nothing needs waiting for.
func turnNow(t *testing.T, c *testCall) turn[string] {
	t.Helper()
	select {
	case tr := <-c.done:
		return tr
	default:
		t.Fatalf("%s has no turn", c.name)
		return turn[string]{}
	}
}

func names(cs []*testCall) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}

func TestLineLeadsTakesAndHandsOn(t *testing.T) {
	t.Parallel()
	l := newLine[*testCall, string]()
	a, b, c, d, e := newTestCall("a"), newTestCall("b"), newTestCall("c"), newTestCall("d"), newTestCall("e")
	q, lead, ok := l.join(1, a, unbounded)
	if !ok || !lead {
		t.Fatalf("first call: lead=%v ok=%v, want it to lead", lead, ok)
	}
	for _, x := range []*testCall{b, c, d, e} {
		if _, lead, ok := l.join(1, x, unbounded); !ok || lead {
			t.Fatalf("%s: lead=%v ok=%v, want it queued behind a", x.name, lead, ok)
		}
	}
	// Another product has a queue of its own.
	if _, lead, _ := l.join(2, newTestCall("other"), unbounded); !lead {
		t.Fatal("the first call of product 2 does not lead")
	}
	// a takes three calls, itself first, refusing c (whose buyer left)
	// and so going on to d.
	taken, _, ok := l.take(q, a, 3, func(x *testCall) (string, bool) {
		return "left", x != c
	})
	if !ok {
		t.Fatal("take reports the leader refused")
	}
	if got := names(taken); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("taken %v, want [a b d]", got)
	}
	if l.leave(q, b) || l.leave(q, c) {
		t.Fatal("a taken call left the queue")
	}
	if got := turnNow(t, c); got.answer != "left" {
		t.Fatalf("c's turn %+v, want the answer keep gave it", got)
	}
	mine := serveTaken(taken, a, "aborted", func() []string { return []string{"for a", "for b", "for d"} })
	if mine != "for a" || turnNow(t, b).answer != "for b" || turnNow(t, d).answer != "for d" {
		t.Fatalf("answers: a %q, b's and d's on their channels; want each its own", mine)
	}
	l.handOn(1, q, a)
	if got := turnNow(t, e); !got.lead {
		t.Fatalf("e's turn %+v, want the lead", got)
	}
	if n := l.waiting(1); n != 1 {
		t.Fatalf("%d waiting, want e alone", n)
	}
	l.take(q, e, 1, nil)
	l.handOn(1, q, e)
	if n := l.waiting(1); n != 0 || l.queues[1] != nil {
		t.Fatalf("product 1 still has a queue (%d waiting) after its last call", n)
	}
}

func TestLineRefusesOverMax(t *testing.T) {
	t.Parallel()
	l := newLine[*testCall, string]()
	l.join(1, newTestCall("a"), 2)
	l.join(1, newTestCall("b"), 2)
	if _, _, ok := l.join(1, newTestCall("c"), 2); ok {
		t.Fatal("a third call joined a queue bounded at 2")
	}
	if n := l.waiting(1); n != 2 {
		t.Fatalf("%d waiting after a refusal, want 2", n)
	}
}

func TestLineWaitLeavesOnlyWhileQueued(t *testing.T) {
	t.Parallel()
	l := newLine[*testCall, string]()
	a, b, c := newTestCall("a"), newTestCall("b"), newTestCall("c")
	q, _, _ := l.join(1, a, unbounded)
	l.join(1, b, unbounded)
	l.join(1, c, unbounded)
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	// b is still queued: it leaves, and the queue forgets it.
	if _, left := l.wait(ended, q, b, nil); !errors.Is(left, context.Canceled) {
		t.Fatalf("queued call's wait: left=%v, want context.Canceled", left)
	}
	if n := l.waiting(1); n != 2 {
		t.Fatalf("%d waiting, want a and c", n)
	}
	// c is taken: its answer is on its way, and wait returns it.
	l.take(q, a, 2, nil)
	answer(c, "sold")
	if tr, left := l.wait(ended, q, c, nil); left != nil || tr.answer != "sold" {
		t.Fatalf("taken call's wait: %+v, left=%v; want its answer", tr, left)
	}
}

// A leader refused by keep hears it from take; nothing is sent to it,
// and the lead still goes on.
func TestLineTakeReturnsTheLeadersRefusal(t *testing.T) {
	t.Parallel()
	l := newLine[*testCall, string]()
	a, b := newTestCall("a"), newTestCall("b")
	q, _, _ := l.join(1, a, unbounded)
	l.join(1, b, unbounded)
	taken, refusal, ok := l.take(q, a, 1, func(x *testCall) (string, bool) { return "gone", x != a })
	if ok || refusal != "gone" || !slices.Equal(names(taken), []string{"b"}) {
		t.Fatalf("take: taken %v, refusal %q, ok %v; want [b], the leader's refusal, false", names(taken), refusal, ok)
	}
	select {
	case tr := <-a.done:
		t.Fatalf("the refused leader was sent %+v", tr)
	default:
	}
	l.handOn(1, q, a)
	if l.queues[1] != nil {
		t.Fatal("the queue outlived its last call")
	}
}

// A leader that failed before taking (its lock was not acquired) is still
// at the head; handOn takes it out and passes the lead on.
func TestLineHandOnBeforeTake(t *testing.T) {
	t.Parallel()
	l := newLine[*testCall, string]()
	a, b := newTestCall("a"), newTestCall("b")
	q, _, _ := l.join(1, a, unbounded)
	l.join(1, b, unbounded)
	l.handOn(1, q, a)
	if got := turnNow(t, b); !got.lead {
		t.Fatalf("b's turn %+v, want the lead", got)
	}
	if n := l.waiting(1); n != 1 {
		t.Fatalf("%d in the queue, want b alone", n)
	}
}

func TestServeTakenAnswersTheOthersWhenWorkPanics(t *testing.T) {
	t.Parallel()
	a, b, c := newTestCall("a"), newTestCall("b"), newTestCall("c")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the work's panic did not go on")
			}
		}()
		serveTaken([]*testCall{a, b, c}, a, "aborted", func() []string { panic("boom") })
	}()
	for _, x := range []*testCall{b, c} {
		if got := turnNow(t, x); got.answer != "aborted" {
			t.Fatalf("%s's turn %+v, want aborted", x.name, got)
		}
	}
	select {
	case tr := <-a.done:
		t.Fatalf("the leader was sent %+v; it answers itself", tr)
	default:
	}
}

// Work that answers the wrong number of calls is a panic, and every other
// call hears aborted exactly once (a second send would block the leader
// for good on the calls' one-answer channels).
func TestServeTakenRefusesAWrongNumberOfAnswers(t *testing.T) {
	t.Parallel()
	a, b, c := newTestCall("a"), newTestCall("b"), newTestCall("c")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("two answers for three calls did not panic")
			}
		}()
		serveTaken([]*testCall{a, b, c}, a, "aborted", func() []string { return []string{"for a", "for b"} })
	}()
	for _, x := range []*testCall{b, c} {
		if got := turnNow(t, x); got.answer != "aborted" {
			t.Fatalf("%s's turn %+v, want aborted", x.name, got)
		}
	}
}
