package seckill

import (
	"context"
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
// waits for its turn: its answer, from a leader that took it into its
// work, or the lead, handed on by the leader before it. A call still
// queued may leave; once taken, or given the lead, its turn is on its way
// and it waits for that.

// line holds the queues of the products being worked on. C is the call,
// a pointer to a struct that embeds a seat[R]; R is a call's answer.
type line[C call[R], R any] struct {
	mu     sync.Mutex
	queues map[int64]*queue[C]
}

// queue is one product's calls. Guarded by line.mu.
type queue[C comparable] struct {
	waiting []C // arrival order; waiting[0] leads when leading is set
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
	seatQueued  seatState = iota // waiting for its turn
	seatLeading                  // at the head: does the next piece of work
	seatTaken                    // in a leader's work; its answer comes on done
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
// lead waits on for its turn, which is bounded by the work it was taken
// into.
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
// to max of them: those that keep accepts (nil keep accepts all). keep
// runs under the line's lock; a call it refuses is out of q all the same,
// and keep answers it (answer) unless it is the leader.
func (l *line[C, R]) take(q *queue[C], max int, keep func(C) bool) []C {
	l.mu.Lock()
	defer l.mu.Unlock()
	var taken []C
	n := 0
	for n < len(q.waiting) && len(taken) < max {
		c := q.waiting[n]
		n++
		c.seatOf().state = seatTaken
		if keep == nil || keep(c) {
			taken = append(taken, c)
		}
	}
	q.waiting = q.waiting[n:]
	return taken
}

// handOn passes the lead of q to the call at its head, or forgets q when
// nobody waits. leader is the call that led, taken out of q if it is still
// there (it took nothing).
func (l *line[C, R]) handOn(productID int64, q *queue[C], leader C) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q.remove(leader)
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

// waiting is how many calls of the product wait in l (the leader of work in
// flight is not waiting).
func (l *line[C, R]) waiting(productID int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.queues[productID]; q != nil {
		return len(q.waiting)
	}
	return 0
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
// the others are answered aborted before the panic goes on: none of them
// may wait for an answer that will never come.
func serveTaken[C call[R], R any](taken []C, leader C, aborted R, work func() []R) (mine R) {
	answered := false
	defer func() {
		if answered {
			return
		}
		for _, c := range taken {
			if c != leader {
				answer(c, aborted)
			}
		}
	}()
	answers := work()
	for i, c := range taken {
		if c == leader {
			mine = answers[i]
			continue
		}
		answer(c, answers[i])
	}
	answered = true
	return mine
}
