// Package fair is the lock's fair wait: goroutines of a process that want
// the same lock wait in memory, first come first served; the process
// stands once in the lock's queue in Redis; a release hands the lock to the
// next in line in its own script, and the grant reaches the process by
// Pub/Sub (or, to a goroutine of the same process, in memory). Over the
// core (package core) and the lease (package lease), it is what package
// lock's Locker does.
//
// Its state is the per-name queue (queue.go), guarded by Locker.mu, which
// only the events in events.go take.
package fair

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/lease"
)

// ErrClosed is returned by a Locker after Close; package lock documents it.
var ErrClosed = errors.New("lock: locker closed")

// Observer is told what the Locker does, for metrics; package lock
// documents it.
type Observer interface {
	Acquired(name string, wait time.Duration, contended bool)
	AcquireFailed(name string, wait time.Duration, err error)
	Released(name string, held time.Duration)
	lease.Observer
}

// Config is what the Locker needs of the lock's options.
type Config struct {
	Prefix          string
	TTL             time.Duration
	WaitTimeout     time.Duration // negative: until the context ends
	RecheckInterval time.Duration
	ClaimLease      time.Duration // the lease of a grant to another process
	// NoLocalRuns: every hold gets a lease of its own from Redis, never one
	// passed on in memory (renewal disabled, or replica acknowledgement).
	NoLocalRuns bool
	Lease       lease.Config
	Observer    Observer
	Test        TestControls
}

// TestControls break one safeguard each, or let a test observe or shorten a
// step. The zero value is the lock as documented; only package lock's
// tests set them.
type TestControls struct {
	// NoReleaseInference: a release whose first call's reply was lost
	// reports only what its second call saw.
	NoReleaseInference bool
	// AcquireIgnoresClose: Acquire returns what it won even when Close
	// began meanwhile.
	AcquireIgnoresClose bool
	// UnsubscribeByQueue: an ending driver removes its lock's channel
	// entry whenever it belongs to the same queue, also one a newer
	// driver added.
	UnsubscribeByQueue bool
	// HealthInterval, when set, replaces healthInterval.
	HealthInterval time.Duration
	// OnEvent, when set, is told of "subscribed" (a driver's subscription
	// is in place), "unsubscribe" (an ending driver is about to remove it)
	// and "unsubscribed", with the lock's name.
	OnEvent func(event, name string)
}

// Locker hands out holds of named locks over a backend, and keeps this
// process's state for each name it holds, awaits or queues for.
type Locker struct {
	backend core.Backend
	cfg     Config
	id      string // this process's identity in the locks' wait queues
	keeper  *lease.Keeper

	ctx    context.Context // ends at Close: stops drivers, renewals, subscriptions
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Locker starts

	mu        sync.Mutex
	queues    map[string]*queue // by lock name; present while held, awaited or queued here
	subs      []*subscriber     // one per backend subscriber client, nil while unused
	closed    bool              // Close has begun
	calls     int               // goCall's calls running
	callsIdle chan struct{}     // closed when calls falls to 0; nil if nobody waits
}

// New returns a Locker over the backend mk makes for the process id; mk's
// goCall runs a call that outlives its caller in a goroutine Close waits for.
func New(cfg Config, mk func(id string, goCall func(func())) core.Backend) *Locker {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Locker{cfg: cfg, id: uuid.NewString(), ctx: ctx, cancel: cancel, queues: make(map[string]*queue)}
	cfg.Lease.Observer = cfg.Observer
	l.keeper = lease.NewKeeper(ctx, cfg.Lease, l.goTracked)
	l.backend = mk(l.id, l.goCall)
	l.subs = make([]*subscriber, len(l.backend.Subscribers()))
	return l
}

// ID is this process's identity in the locks' queues in Redis.
func (l *Locker) ID() string { return l.id }

// Close stops the Locker's background work: waiters get ErrClosed, holds
// stop renewing and report ErrClosed through Lost. It takes the process
// out of every lock's queue (a ticket left queued could be granted to
// this closed process and block the lock for its claim lease), and waits
// for every goroutine the Locker started.
func (l *Locker) Close() {
	subs, held, tickets := l.closing()
	for _, t := range tickets {
		l.withdraw(context.Background(), t.k, t.ticket)
	}
	l.cancel()
	for _, h := range held {
		h.Lose(ErrClosed)
	}
	l.keeper.Stop()
	for _, s := range subs {
		if s != nil {
			s.close()
		}
	}
	l.wg.Wait()
	<-l.callsDone()
}

// withdrawal is a ticket Close withdraws.
type withdrawal struct {
	k      core.Keys
	ticket string
}

// withdraw gives ticket up for good, also after the caller's context
// ended: it deletes the lock if ticket owns it (passing it to the next
// waiter), takes the ticket out of the queue, and leaves a tombstone that
// makes a late acquire with it fail. If the withdraw fails too, the
// lease's TTL frees the lock.
func (l *Locker) withdraw(ctx context.Context, k core.Keys, ticket string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.ReleaseTimeout)
	defer cancel()
	_ = l.backend.Withdraw(cctx, k, ticket)
}

// health is how long a subscription may stay silent before it is pinged;
// a ping unanswered for as long again means the connection is dead (a
// peer gone without a FIN), and it is replaced. It also bounds every call
// on the subscription's connection.
func (l *Locker) health() time.Duration {
	if d := l.cfg.Test.HealthInterval; d > 0 {
		return d
	}
	return healthInterval
}

const healthInterval = 5 * time.Second

// event tells a test of a step it orders others around (TestControls).
func (l *Locker) event(event, name string) {
	if f := l.cfg.Test.OnEvent; f != nil {
		f(event, name)
	}
}
