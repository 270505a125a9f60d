package fair

import (
	"cmp"
	"fmt"
	"time"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// The Locker's events: every use of Locker.mu is in this file. Each event
// takes the mutex, moves a queue (queue.go) or the state around it (the
// queues by name, the subscriptions' channels, the runs, the goroutines'
// count), and returns what the caller does next, outside the mutex: a
// call to Redis, a wait. A hold passed to a waiting goroutine is
// delivered after the mutex is released (handOff). No event takes another
// mutex, or calls Redis, while it holds this one.

// ---- Goroutines ----

// goTracked runs fn in a goroutine counted in l.wg, and reports false,
// without running it, once Close has begun.
func (l *Locker) goTracked(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fn()
	}()
	return true
}

// goCall runs fn, a backend's call that may outlive its caller (a
// Redlock node's answer after the quorum was reached), in a goroutine
// counted in l.calls. Close waits for them after l.wg (callsDone), since a
// counted goroutine may start one while Close waits; the calls are
// bounded by the node timeout.
func (l *Locker) goCall(fn func()) {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	go func() {
		defer l.callEnded()
		fn()
	}()
}

func (l *Locker) callEnded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls--
	if l.calls == 0 && l.callsIdle != nil {
		close(l.callsIdle)
		l.callsIdle = nil
	}
}

// callsDone returns a channel closed once no call of goCall is running.
func (l *Locker) callsDone() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if l.callsIdle == nil {
		l.callsIdle = make(chan struct{})
	}
	return l.callsIdle
}

// tend is called under l.mu after every event of q: it starts or wakes
// q's driver while q has work, and forgets q when nothing is left.
func (l *Locker) tend(q *queue) {
	if q.hasWork() && q.driver == stopped && !l.closed {
		q.driverStarts()
		l.wg.Add(1)
		go l.drive(q)
	}
	if q.driver != stopped {
		q.wake() // also when nothing is left: the driver ends
		return
	}
	if q.idle() && l.queues[q.name] == q {
		delete(l.queues, q.name)
	}
}

// ---- Acquiring ----

// begin: a goroutine wants the lock called name. With nobody here holding
// or awaiting it, it tries Redis directly (w is nil, q is trying);
// otherwise it waits in line as w, unless it does not wait.
func (l *Locker) begin(name string, wait bool) (q *queue, w *waiter, err error) {
	if err := core.CheckName(name); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, ErrClosed
	}
	q = l.queues[name]
	if q == nil {
		q = newQueue(l, core.NewKeys(l.cfg.Prefix, name))
		l.queues[name] = q
		q.tryStart()
		l.mu.Unlock()
		return q, nil, nil
	}
	if !wait {
		why := "held or awaited in this process"
		if !q.busy() && len(q.waiters) == 0 {
			why = "being withdrawn by this process" // a ticket or a grant nobody took
		}
		l.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %q is %s", core.ErrNotAcquired, name, why)
	}
	w = &waiter{ch: make(chan *Hold, 1)}
	d := q.arrive(w, false)
	l.tend(q)
	l.mu.Unlock()
	d.deliver()
	return q, w, nil
}

// tried: q's direct attempt came back with g (nil: taken, or err). It
// returns the hold won, or the waiter to wait as (the lock was taken, and
// the goroutine waits: first in line, as it came first), or why not. A
// lock won after Close began is to be withdrawn (unwanted).
func (l *Locker) tried(q *queue, g *grant, err error, wait bool) (h *Hold, w *waiter, unwanted string, _ error) {
	l.mu.Lock()
	if g != nil && l.closed && !l.cfg.Test.AcquireIgnoresClose {
		// No hold may start after Close began: nothing would renew it or
		// report its loss.
		q.tried(nil)
		l.tend(q)
		l.mu.Unlock()
		return nil, nil, g.ticket, ErrClosed
	}
	if h = q.tried(g); h != nil {
		l.mu.Unlock()
		h.start()
		return h, nil, "", nil
	}
	if err == nil && !wait {
		err = fmt.Errorf("%w: %q is held", core.ErrNotAcquired, q.name)
	}
	if err != nil {
		l.tend(q)
		l.mu.Unlock()
		return nil, nil, "", err
	}
	w = &waiter{ch: make(chan *Hold, 1)}
	d := q.arrive(w, true)
	l.tend(q)
	l.mu.Unlock()
	d.deliver()
	return nil, w, "", nil
}

// leave: w's wait ended. removed is false if the lock was passed to it
// already; lastErr is the driver's last Redis error.
func (l *Locker) leave(q *queue, w *waiter) (removed bool, lastErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	removed = q.leave(w)
	lastErr = q.lastErr
	l.tend(q)
	return removed, lastErr
}

// beginAll is begin for each of names, none of which waits: the queues to
// try (nil where the name is refused, with errs saying why).
func (l *Locker) beginAll(names []string) (qs []*queue, errs []error) {
	qs, errs = make([]*queue, len(names)), make([]error, len(names))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, name := range names {
		switch err := core.CheckName(name); {
		case err != nil:
			errs[i] = err
		case l.closed:
			errs[i] = ErrClosed
		case l.queues[name] != nil:
			errs[i] = fmt.Errorf("%w: %q is held or awaited in this process", core.ErrNotAcquired, name)
		default:
			qs[i] = newQueue(l, core.NewKeys(l.cfg.Prefix, name))
			l.queues[name] = qs[i]
			qs[i].tryStart()
		}
	}
	return qs, errs
}

// triedAll is tried for each queue of qs that was tried (sentFor[j] is
// the queue of res[j] and rerrs[j]), none waiting: the holds won, and the
// grants won after Close began, to withdraw (unwanted: indexes of res).
func (l *Locker) triedAll(qs []*queue, sentFor []int, res []core.AcquireResult, rerrs []error, errs []error) (holds []*Hold, unwanted []int) {
	holds = make([]*Hold, len(qs))
	l.mu.Lock()
	for j, i := range sentFor {
		q := qs[i]
		var g *grant
		if rerrs[j] == nil && res[j].Status == core.Acquired {
			g = &grant{ticket: res[j].Owner, token: res[j].Token, deadline: res[j].Deadline}
		}
		if g != nil && l.closed && !l.cfg.Test.AcquireIgnoresClose {
			q.tried(nil)
			l.tend(q)
			unwanted = append(unwanted, j)
			errs[i] = ErrClosed
			continue
		}
		if holds[i] = q.tried(g); holds[i] != nil {
			continue
		}
		l.tend(q)
		if rerrs[j] != nil {
			errs[i] = notAcquired(q.name, rerrs[j])
		} else {
			errs[i] = fmt.Errorf("%w: %q is held", core.ErrNotAcquired, q.name)
		}
	}
	l.mu.Unlock()
	for _, h := range holds {
		if h != nil {
			h.start()
		}
	}
	return holds, unwanted
}

// isClosed reports whether Close has begun.
func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// ---- Releasing ----

// releasing: h's release begins (e is its lease as it began). The lock
// goes to the next goroutine here in memory (the step's checked answers
// the release), or the release goes to Redis, and queues the process
// under the step's requeue ticket for its waiters.
func (l *Locker) releasing(h *Hold, e lease.Ending) releaseStep {
	l.mu.Lock()
	st := releaseStep{q: l.queues[h.k.Name]}
	if st.q != nil {
		var d handOff
		if st.checked, d = st.q.passHeld(h, e); st.checked != nil {
			l.tend(st.q)
			l.mu.Unlock()
			d.deliver()
			return st
		}
	}
	if h.run != nil {
		h.run.ended = true
	}
	if st.q != nil {
		st.requeue = st.q.release(h)
	}
	l.mu.Unlock()
	return st
}

// released: h's release, sent at sent, came back with res or err
// (released is its verdict). It is the last check of h's run: it answers
// the releases that handed the lock on before it, if no renewal did; with
// its error if it failed, as nothing of the run will check again. It
// returns a ticket of this process granted the lock that nobody here
// takes, to withdraw.
func (l *Locker) released(h *Hold, st releaseStep, sent time.Time, released bool, res core.ReleaseResult, err error) (unwanted string) {
	l.mu.Lock()
	if h.run != nil {
		if err == nil && released {
			h.run.confirmed(sent)
		} else {
			h.run.runLost(cmp.Or(err, lease.ErrLeaseLost))
		}
	}
	var d handOff
	if q := st.q; q != nil && l.queues[h.k.Name] == q {
		unwanted, d = q.released(h, st.requeue, sent, res, err)
		l.tend(q)
	} else if err == nil && res.Granted {
		unwanted = res.Ticket
	}
	l.mu.Unlock()
	d.deliver()
	return unwanted
}

// checked: an ownership check of h's run, sent at sent, found the key the
// run's (ok) or not. Not: the run is lost, unless its own release may have
// deleted the key; the run's current holder is told at once, then every
// release waiting for a check.
func (l *Locker) checked(h *Hold, sent time.Time, ok bool) {
	l.mu.Lock()
	r := h.run
	if ok {
		r.confirmed(sent)
		l.mu.Unlock()
		return
	}
	if !r.foundLost(lease.ErrLeaseLost) {
		l.mu.Unlock()
		return
	}
	var current *Hold
	if q := l.queues[h.k.Name]; q != nil && q.holder != nil && q.holder.run == r {
		current = q.holder
	}
	l.mu.Unlock()
	if current != nil {
		current.Lose(lease.ErrLeaseLost)
	}
	l.mu.Lock()
	r.runLost(lease.ErrLeaseLost)
	l.mu.Unlock()
}

// leaseEnded: h lost its lease. It no longer keeps this process's other
// waiters from contending, and its run is over.
func (l *Locker) leaseEnded(h *Hold, cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.run != nil {
		h.run.runLost(cause)
	}
	if q := l.queues[h.k.Name]; q != nil {
		q.lost(h)
		l.tend(q)
	}
}

// ---- The driver ----

// step is what a driver does next, with what it needs for it.
type step struct {
	a          action
	closed     bool        // stop: the Locker is closed (Close withdraws the tickets)
	ticket     string      // withdraw, register, refresh: the ticket
	sent       time.Time   // register, refresh: the call's send time
	wait       pause       // sleep
	subscribed bool        // stop: the driver had subscribed
	mine       []*subEntry // stop: the entries it added
}

// nextStep: q's driver asks what to do now (queue.next), and takes the
// step's first part here.
func (l *Locker) nextStep(q *queue) (s step) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		q.driverStopsAtClose()
		return step{a: stop, closed: true}
	}
	s.a = q.next()
	switch s.a {
	case stop:
		s.subscribed, s.mine = q.driverEnds()
		l.tend(q)
	case withdraw:
		s.ticket = q.withdrawing[0]
	case subscribe:
		q.driverSubscribes()
	case sleep:
		s.wait = q.sleepFor()
	case register, refresh:
		s.ticket = q.sending(s.a)
		s.sent = time.Now()
	}
	return s
}

// withdrawDone: the driver's withdraw of ticket came back with err.
func (l *Locker) withdrawDone(q *queue, ticket string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q.withdrawn(ticket, err)
}

// contended: the driver's call for ticket, sent at sent, came back. It
// returns how long the driver pauses.
func (l *Locker) contended(q *queue, ticket string, sent time.Time, res core.AcquireResult, err error, failures int) pause {
	l.mu.Lock()
	p, d := q.attempted(ticket, sent, res, err, failures)
	l.tend(q)
	l.mu.Unlock()
	d.deliver()
	return p
}

// ---- Subscriptions ----

// addEntries: q's driver listens on its lock's channel: an entry on the
// subscription of each backend client, started if needed. It returns the
// subscriptions and their entries.
func (l *Locker) addEntries(q *queue) (subs []*subscriber, entries []*subEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil
	}
	for i, c := range l.backend.Subscribers() {
		s := l.subs[i]
		if s == nil {
			s = newSubscriber(c)
			l.subs[i] = s
			l.wg.Add(1)
			go l.own(s)
		}
		e := &subEntry{q: q, ready: make(chan struct{})}
		s.channels[q.k.Channel] = e
		subs = append(subs, s)
		entries = append(entries, e)
	}
	q.subscribedWith(entries)
	return subs, entries
}

// subscribed: q's driver's subscription is in place, or was given up on.
func (l *Locker) subscribed(q *queue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q.driverListens()
}

// removeEntries: q's ending driver removes mine, the entries it added; a
// subscription left without channels is closed (stop), the others send
// UNSUBSCRIBE if nobody wants the channel any more (keep).
func (l *Locker) removeEntries(q *queue, mine []*subEntry) (keep, stop []*subscriber) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.subs {
		if s == nil {
			continue
		}
		e := s.channels[q.k.Channel]
		if e != nil && (contains(mine, e) || (l.cfg.Test.UnsubscribeByQueue && e.q == q)) {
			delete(s.channels, q.k.Channel)
		}
		if len(s.channels) == 0 {
			l.subs[i] = nil
			stop = append(stop, s)
		} else {
			keep = append(keep, s)
		}
	}
	return keep, stop
}

// wants reports whether s should listen on ch now.
func (l *Locker) wants(s *subscriber, ch string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return s.channels[ch] != nil
}

// wanted lists every channel s should listen on now.
func (l *Locker) wanted(s *subscriber) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	chans := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		chans = append(chans, ch)
	}
	return chans
}

// confirmed: the server confirmed s's subscription to ch.
func (l *Locker) confirmed(s *subscriber, ch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := s.channels[ch]; e != nil && !e.confirmed {
		e.confirmed = true
		close(e.ready)
	}
}

// grantFor: a grant message on ch for ticket, a ticket of this process.
func (l *Locker) grantFor(s *subscriber, ch, ticket string, token, last int64) {
	l.mu.Lock()
	var d handOff
	if e := s.channels[ch]; e != nil && !l.closed {
		d = e.q.grantArrived(ticket, token, last)
		l.tend(e.q)
	}
	l.mu.Unlock()
	d.deliver()
}

// wokenOn: a release on a Redlock node may have freed the lock of ch; its
// driver tries again.
func (l *Locker) wokenOn(s *subscriber, ch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := s.channels[ch]; e != nil {
		e.q.woken()
		e.q.wake()
	}
}

// ---- Close, and what tests and metrics read ----

// closing: Close begins. It hands Close the subscriptions to close, the
// holds to end and the tickets to withdraw.
func (l *Locker) closing() (subs []*subscriber, held []*Hold, tickets []withdrawal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	subs = l.subs
	l.subs = make([]*subscriber, len(subs))
	for _, q := range l.queues {
		holder, ts := q.close()
		if holder != nil {
			held = append(held, holder)
		}
		for _, t := range ts {
			tickets = append(tickets, withdrawal{q.k, t})
		}
	}
	return subs, held, tickets
}

// Names reports how many lock names the Locker keeps state for: names
// held, awaited or queued for, still being withdrawn, or whose grants it
// is subscribed to.
func (l *Locker) Names() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make(map[string]bool, len(l.queues))
	for name := range l.queues {
		names[name] = true
	}
	for _, s := range l.subs {
		if s != nil {
			for _, e := range s.channels {
				names[e.q.name] = true
			}
		}
	}
	return len(names)
}

// Waiting reports how many goroutines wait for the lock called name.
func (l *Locker) Waiting(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.queues[name]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Listening reports whether the driver for the lock called name listens
// for grants, so that a release may queue the process in Redis.
func (l *Locker) Listening(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[name]
	return q != nil && q.driver == listening
}
