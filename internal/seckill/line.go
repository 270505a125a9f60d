package seckill

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// A line is how the calls of one process for one product share one piece
// of work: group commit (batch.go) shares a lock hold among purchases,
// shared reads (reads.go) share a read among buyers.
//
//	calls ──queue per product──▶ the oldest leads: takes calls from the head ─ works ─ answers each ─ hands the lead on
//
// The first call to find nobody leading leads at once. Every other call
// waits for its turn: the lead, handed on by the leader before it, or its
// answer from the leader that took it (the work's answer, or at once a
// refusal, such as for a buyer who left). A call still queued may leave;
// once taken, or given the lead, it waits for its turn: a lead is already
// on its way, and an answer comes when the leader's work ends, which the
// users of a line bound (a batch's and a read's timeouts).

// line holds the queues of the products being worked on. C is the call,
// a pointer to a struct that embeds a seat[R]; R is a call's answer.
type line[C call[R], R any] struct {
	mu     sync.Mutex
	queues map[int64]*queue[C]
}

// queue is one product's calls. Guarded by line.mu.
type queue[C comparable] struct {
	waiting []C // arrival order; the leader is waiting[0] until it takes
	leading bool
}

// seat is a call's place in a line.
type seat[R any] struct {
	state seatState    // guarded by line.mu
	done  chan turn[R] // capacity 1: the answer, or the lead
}

// seated is anything that embeds a seat.
type seated[R any] interface{ seatOf() *seat[R] }

// call is a line's call type: a pointer that embeds a seat.
type call[R any] interface {
	comparable
	seated[R]
}

func (s *seat[R]) seatOf() *seat[R] { return s }

func newSeat[R any]() seat[R] { return seat[R]{done: make(chan turn[R], 1)} }

type seatState int

const (
	seatQueued  seatState = iota // in the queue, waiting for its turn
	seatLeading                  // in the queue, at its head, given the lead
	seatTaken                    // out of the queue, taken by a leader (the leader too)
)

// turn is what a waiting call is given.
type turn[R any] struct {
	answer R
	lead   bool // no answer: the call now leads its queue
}

// unbounded is join's max for a line whose queues may grow without bound.
const unbounded = math.MaxInt

func newLine[C call[R], R any]() line[C, R] {
	return line[C, R]{queues: make(map[int64]*queue[C])}
}

// join adds c to the product's queue. lead is true when c found nobody
// leading and so leads at once. ok is false, and c is not queued, when max
// calls already wait.
func (l *line[C, R]) join(productID int64, c C, max int) (q *queue[C], lead, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q = l.queues[productID]
	if q == nil {
		q = &queue[C]{}
		l.queues[productID] = q
	}
	if len(q.waiting) >= max {
		return nil, false, false
	}
	q.waiting = append(q.waiting, c)
	if !q.leading {
		q.leading, c.seatOf().state = true, seatLeading
	}
	return q, c.seatOf().state == seatLeading, true
}

// wait waits for c's turn until ctx ends or expire fires (nil: never).
// Then a call still queued leaves q, and wait returns why (ctx's error, or
// context.DeadlineExceeded for expire); a call already taken or given the
// lead waits on for its turn, whatever ctx (see the line's doc).
func (l *line[C, R]) wait(ctx context.Context, q *queue[C], c C, expire <-chan time.Time) (t turn[R], left error) {
	s := c.seatOf()
	select {
	case t = <-s.done:
		return t, nil
	case <-ctx.Done():
		left = ctx.Err()
	case <-expire:
		left = context.DeadlineExceeded
	}
	if l.leave(q, c) {
		return t, left
	}
	return <-s.done, nil
}

// leave takes c out of q if it is still queued, and reports whether it was.
func (l *line[C, R]) leave(q *queue[C], c C) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.seatOf().state != seatQueued {
		return false
	}
	q.remove(c)
	return true
}

// take removes calls from the head of q, marks them taken and returns up
// to max of them, those that keep accepts (nil keep accepts all). keep,
// run under the line's lock, refuses a call by returning its answer and
// false: the call is out of q all the same, does not count towards max,
// and take sends it that answer, except to leader, whose refusal take
// returns with ok false.
func (l *line[C, R]) take(q *queue[C], leader C, max int, keep func(C) (R, bool)) (taken []C, refusal R, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = true
	n := 0
	for n < len(q.waiting) && len(taken) < max {
		c := q.waiting[n]
		n++
		c.seatOf().state = seatTaken
		if keep == nil {
			taken = append(taken, c)
			continue
		}
		r, kept := keep(c)
		switch {
		case kept:
			taken = append(taken, c)
		case c == leader:
			refusal, ok = r, false
		default:
			answer(c, r)
		}
	}
	q.waiting = q.waiting[n:]
	return taken, refusal, ok
}

// handOn passes the lead of q to the call at its head, or forgets q when
// nobody waits. leader is the call that led, taken out of q if it is still
// there (it took nothing).
func (l *line[C, R]) handOn(productID int64, q *queue[C], leader C) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if leader.seatOf().state == seatLeading {
		q.remove(leader) // waiting[0]
	}
	if len(q.waiting) == 0 {
		q.leading = false
		if l.queues[productID] == q {
			delete(l.queues, productID)
		}
		return
	}
	next := q.waiting[0].seatOf()
	next.state = seatLeading
	next.done <- turn[R]{lead: true}
}

// waiting is how many calls of the product are in its queue: a leader
// that has not taken yet (a batch's, waiting for the lock) is one of them.
func (l *line[C, R]) waiting(productID int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.queues[productID]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// products is how many products have a queue in l: those with calls
// queued, led or at work.
func (l *line[C, R]) products() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queues)
}

func (q *queue[C]) remove(c C) {
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return
		}
	}
}

// answer gives a taken call its answer.
func answer[R any](c seated[R], r R) { c.seatOf().done <- turn[R]{answer: r} }

// serveTaken runs work for the calls a leader took, gives each call but
// the leader its answer (work's answers[i] for taken[i]) and returns the
// leader's (the zero R if the leader is not among them). If work panics,
// or returns a wrong number of answers, every other call is answered
// aborted before the panic goes on: none of them may wait for an answer
// that will never come.
func serveTaken[C call[R], R any](taken []C, leader C, aborted R, work func() []R) (mine R) {
	sent := 0 // taken[:sent] are answered
	defer func() {
		for _, c := range taken[sent:] {
			if c != leader {
				answer(c, aborted)
			}
		}
	}()
	answers := work()
	if len(answers) != len(taken) {
		panic(fmt.Sprintf("seckill: %d answers for %d calls", len(answers), len(taken)))
	}
	for i, c := range taken {
		if c == leader {
			mine = answers[i]
		} else {
			answer(c, answers[i])
		}
		sent = i + 1
	}
	return mine
}
