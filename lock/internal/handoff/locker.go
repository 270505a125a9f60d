// Package handoff is the lock's wait in one process: goroutines that want
// the same lock wait in memory, first come first served; one goroutine per
// lock (the driver) gets the lock from Redis for them, standing once for
// the whole process in the lock's line (package queue) and listening for
// its grants (package subscription); and a lock held here passes from
// goroutine to goroutine without a round trip while its reserved tokens
// last. Over the pattern (package core), the lease (package lease) and
// the line, it is what package lock's Locker does.
//
// Its state is one line per lock name (line.go), a state machine with a
// mutex of its own; the Locker's mutex guards only the map of lines and
// the Locker's goroutines. The Locker takes a line's mutex only outside
// its own, and a line takes the Locker's only inside its own
// (shared.spawn, shared.forget).
//
// The files, from the bottom: config.go (what the package needs from its
// callers and from Redis), run.go (the checks of holds handed on in
// memory), line.go (the per-name state and its types), turn.go (a hold
// ends), driver.go (the goroutine that gets the lock from Redis for the
// waiting goroutines), locker.go, acquire.go and release.go (the Locker).
package handoff

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckill-ref/seckill/lock/internal/backend"
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
	"github.com/seckill-ref/seckill/lock/internal/queue"
	"github.com/seckill-ref/seckill/lock/internal/subscription"
)

// Locker hands out holds of named locks over a backend, and keeps this
// process's state for each name it holds, awaits or stands in line for.
type Locker struct {
	shared      *shared
	subscribers []*subscription.Subscriber // one per backend client

	life context.Context // ends at Close: stops drivers and renewals
	end  context.CancelFunc
	wg   sync.WaitGroup // every goroutine the Locker starts

	mapMu     sync.Mutex
	lines     map[string]*line // by lock name; present while held, awaited or in line here
	calls     int              // goCall's calls running
	callsIdle chan struct{}    // closed when calls falls to 0; nil if nobody waits
}

// NewLocker returns a Locker over the backend mk makes for the process id; mk's
// goCall runs a call that outlives its caller in a goroutine Close waits for.
func NewLocker(cfg Config, mk func(id string, goCall func(func())) backend.Backend) *Locker {
	life, end := context.WithCancel(context.Background())
	l := &Locker{life: life, end: end, lines: make(map[string]*line)}
	cfg.Lease.Observer = cfg.Observer
	l.shared = &shared{cfg: cfg, id: uuid.NewString(), spawn: l.spawn, forget: l.forget}
	l.shared.keeper = lease.NewKeeper(life, cfg.Lease, l.goTracked)
	l.shared.backend = mk(l.shared.id, l.goCall)
	for _, c := range l.shared.backend.Subscribers() {
		l.subscribers = append(l.subscribers, subscription.New(c, subscription.Config{
			Health:  cfg.Test.HealthInterval,
			Backoff: func(n int) time.Duration { return lease.Backoff(n, cfg.RecheckInterval) },
			StopAll: cfg.Test.StopAllListeners,
		}))
	}
	return l
}

// ID is this process's id in the locks' lines in Redis.
func (l *Locker) ID() string { return l.shared.id }

// giveUp gives tickets[i] of ks[i] up for good, also after the caller's
// context ended: a lock one holds is passed to the next in line, and a
// late request carrying one fails. If the withdraw fails too, the lease's
// TTL frees the lock.
func (l *Locker) giveUp(ctx context.Context, ks []queue.Keys, tickets []string) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.ReleaseTimeout)
	defer cancel()
	_ = l.shared.backend.Withdraw(wctx, ks, tickets)
}

// Close stops the Locker's background work: waiters get ErrClosed, holds
// stop renewing and report ErrClosed through Lost. It takes the process
// out of every lock's line (a ticket left there could be granted to this
// closed process and block the lock for its claim), and waits for every
// goroutine the Locker started.
func (l *Locker) Close() {
	l.mapMu.Lock()
	l.shared.closed.Store(true)
	lines := make([]*line, 0, len(l.lines))
	for _, ln := range l.lines {
		lines = append(lines, ln)
	}
	l.mapMu.Unlock()
	var held []*Hold
	var ks []queue.Keys
	var tickets []string
	for _, ln := range lines {
		h, ts := ln.shutdown()
		if h != nil {
			held = append(held, h)
		}
		for _, t := range ts {
			ks, tickets = append(ks, ln.k), append(tickets, t)
		}
	}
	if len(tickets) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), core.ReleaseTimeout)
		_ = l.shared.backend.Withdraw(ctx, ks, tickets)
		cancel()
	}
	l.end()
	for _, h := range held {
		h.Lose(ErrClosed)
	}
	l.shared.keeper.Stop()
	for _, s := range l.subscribers {
		s.Close()
	}
	l.wg.Wait()
	<-l.callsDone()
}

// lineFor is the line of the lock called name, made if the Locker has
// none: ErrClosed once Close has begun.
func (l *Locker) lineFor(name string) (*line, error) {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
	if l.shared.closed.Load() {
		return nil, ErrClosed
	}
	ln := l.lines[name]
	if ln == nil {
		ln = newLine(l.shared, queue.NewKeys(l.shared.cfg.Prefix, name))
		l.lines[name] = ln
	}
	return ln, nil
}

// forget takes ln, idle, out of the map (shared.forget); under ln.mu.
func (l *Locker) forget(ln *line) {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
	if l.lines[ln.k.Name] == ln {
		delete(l.lines, ln.k.Name)
	}
}

// spawn starts ln's driver (shared.spawn); under ln.mu.
func (l *Locker) spawn(ln *line) bool {
	return l.goTracked(func() { ln.drive(l.life, l.subscribers, l.notify) })
}

// goTracked runs fn in a goroutine counted in l.wg, and reports false,
// without running it, once Close has begun.
func (l *Locker) goTracked(fn func()) bool {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
	if l.shared.closed.Load() {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fn()
	}()
	return true
}

// goCall runs fn, a backend's call that may outlive its caller (a Redlock
// node's answer after the quorum was reached), in a goroutine counted in
// l.calls. Close waits for them after l.wg (callsDone), since a counted
// goroutine may start one while Close waits; the calls are bounded by the
// node timeout.
func (l *Locker) goCall(fn func()) {
	l.mapMu.Lock()
	l.calls++
	l.mapMu.Unlock()
	go func() {
		defer l.callEnded()
		fn()
	}()
}

func (l *Locker) callEnded() {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
	l.calls--
	if l.calls == 0 && l.callsIdle != nil {
		close(l.callsIdle)
		l.callsIdle = nil
	}
}

// callsDone returns a channel closed once no call of goCall is running.
func (l *Locker) callsDone() <-chan struct{} {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
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

// notify tells a test of a step it orders others around (TestControls).
func (l *Locker) notify(step, name string) {
	if f := l.shared.cfg.Test.OnEvent; f != nil {
		f(step, name)
	}
}

// Names reports how many lock names the Locker keeps state for: names
// held, awaited or in line for, or still being withdrawn.
func (l *Locker) Names() int {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
	return len(l.lines)
}

// Waiting reports how many goroutines wait for the lock called name.
func (l *Locker) Waiting(name string) int {
	ln := l.existing(name)
	if ln == nil {
		return 0
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.waiters)
}

// Listening reports whether the driver for the lock called name listens
// for grants, so that a release may put the process back in line.
func (l *Locker) Listening(name string) bool {
	ln := l.existing(name)
	if ln == nil {
		return false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.driver == listening
}

func (l *Locker) existing(name string) *line {
	l.mapMu.Lock()
	defer l.mapMu.Unlock()
	return l.lines[name]
}
