package lock

import (
	"errors"
	"strings"
	"time"
)

// Defaults for the zero Options.
const (
	// DefaultTTL is the lease. It bounds how long a crashed holder blocks
	// everyone else (the "no deadlock" requirement); with renewal on
	// it does not bound how long a live holder may work.
	DefaultTTL = 10 * time.Second

	// DefaultWaitTimeout bounds Acquire's wait when the context has no
	// earlier deadline. A flash sale would rather answer "busy" than queue
	// a buyer for long.
	DefaultWaitTimeout = 5 * time.Second

	// DefaultRecheckInterval bounds how long a waiting process goes without
	// asking Redis itself. Hand-off normally arrives as a message; the
	// re-check covers a lost message and a holder that crashed (its lease
	// runs out and the next re-check takes over). Redisson's equivalent wait
	// is the remaining lease, up to 30 s.
	DefaultRecheckInterval = 100 * time.Millisecond

	// DefaultPrefix starts every key and channel the Locker uses.
	DefaultPrefix = "lock:"

	// DefaultFenceTTL is how long a lock name's fence counter outlives its
	// last acquisition (Options.FenceTTL).
	DefaultFenceTTL = 24 * time.Hour
)

// Options configure a Locker. The zero value gives the documented defaults.
type Options struct {
	// TTL is the lease each acquisition takes. Default DefaultTTL. Redis
	// keeps it in whole milliseconds, and so does the Locker: it is
	// rounded down.
	TTL time.Duration

	// WaitTimeout bounds how long Acquire waits; the caller's context may
	// end the wait sooner. Default DefaultWaitTimeout; negative means wait
	// until the context ends.
	WaitTimeout time.Duration

	// RenewInterval is how often a held lock's lease is extended in the
	// background (the watchdog). Default TTL/3, as Redisson renews its 30 s
	// lease every 10 s: two renewals may fail before the lease runs out.
	RenewInterval time.Duration

	// DisableRenewal turns the watchdog off: the lease then ends TTL after
	// the acquisition unless the holder calls Extend. Useful to show what
	// happens when work outlives the lease.
	DisableRenewal bool

	// RecheckInterval bounds the fallback re-check of a waiting process; each
	// wait is jittered by ±25% so processes do not re-check in step.
	// Default DefaultRecheckInterval. A waiting process's place in the queue
	// expires after five intervals without a re-check, and a grant to it
	// holds the lock for five intervals (or the TTL, if shorter) until the
	// process takes it. Used in whole milliseconds, rounded down.
	RecheckInterval time.Duration

	// FenceTTL is how long the fence counter of a lock name (the last
	// fencing token issued) stays in Redis after the last acquisition; each
	// acquisition sets it again. Default DefaultFenceTTL; negative: the
	// counter never expires. It must be at least TTL. Without it, Redis
	// keeps one counter for every name ever locked.
	//
	// Letting the counter expire is safe by the rule that also covers a
	// counter Redis lost (see Lock.Token): a token is the server's clock
	// in microseconds, or the last token plus one if that is larger. After
	// the counter expired, the next token is the clock, which is larger
	// than every earlier token provided the clock has not stepped back, since
	// the last acquisition, by more than FenceTTL minus the time by which
	// the counter led the clock then (it leads only while acquisitions come
	// faster than one per microsecond, or after a Redlock raise or a
	// failover from a server whose clock ran ahead). A clock stepped back
	// by more than that (by hand, or a server restored with a clock a day
	// behind) would issue smaller tokens than the last one: a resource that
	// refuses them then refuses every holder until the clock catches up,
	// and one that accepts equal or smaller tokens would let a stale holder
	// write.
	FenceTTL time.Duration

	// Prefix starts every key and channel. Default DefaultPrefix. It must
	// not contain '{' or '}', which would change the Cluster hash tag.
	Prefix string

	// WaitReplicas, when positive, makes every acquisition wait until that
	// many replicas of the master acknowledge it (Redis WAIT), and fail
	// with ErrNotReplicated otherwise. It narrows the window in which a
	// failover loses a lock, for a master with replicas behind
	// a plain or Sentinel client; it costs one more round trip per
	// acquisition. Not for Cluster or Redlock.
	WaitReplicas int

	// WaitReplicasTimeout bounds that wait. Default 500 ms.
	WaitReplicasTimeout time.Duration

	// NodeTimeout bounds each node's answer in Redlock mode: a node that
	// has not answered by then counts as failed, so one slow or dead node
	// does not eat the lease. Default TTL/100, between 10 ms and 50 ms
	// (redis.io suggests 5 to 50 ms for a 10 s lease).
	NodeTimeout time.Duration

	// Observer, when set, is told about acquisitions, waits, releases,
	// renewal failures and lost leases, to count them.
	Observer Observer

	// UnsafeCounterTokens is UNSAFE, for demonstrations and fault tests
	// only; never set it in production. It issues each fencing token as
	// the last token plus one, reading the server's clock only when the
	// counter is missing, instead of the larger of the two. After a Redis
	// restart from a stale snapshot, or a failover to a replica that had
	// not received the latest acquisitions, tokens then go backwards: a
	// resource that accepts equal tokens lets two holders write, and one
	// that refuses them refuses every holder until the counter catches up.
	UnsafeCounterTokens bool
}

// withDefaults fills in the defaults and checks o. keepSubMillisecond (a
// test's control) keeps durations finer than Redis's milliseconds.
func (o Options) withDefaults(keepSubMillisecond bool) (Options, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if !keepSubMillisecond {
		// Redis keeps leases in whole milliseconds and the scripts are sent
		// TTL.Milliseconds(). Every deadline the Locker computes adds these
		// durations, so they are rounded down here, once: a deadline must
		// never be later than the key's expiry.
		o.TTL = o.TTL.Truncate(time.Millisecond)
		o.RecheckInterval = o.RecheckInterval.Truncate(time.Millisecond)
	}
	if o.TTL < 10*time.Millisecond {
		return o, errors.New("lock: TTL must be at least 10ms")
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.TTL / 3
	}
	if o.RenewInterval < 0 || o.RenewInterval >= o.TTL {
		return o, errors.New("lock: RenewInterval must be positive and shorter than TTL")
	}
	if o.RecheckInterval == 0 {
		o.RecheckInterval = DefaultRecheckInterval
	}
	if o.RecheckInterval < time.Millisecond {
		return o, errors.New("lock: RecheckInterval must be at least 1ms")
	}
	if o.FenceTTL == 0 {
		o.FenceTTL = DefaultFenceTTL
	}
	if o.FenceTTL > 0 {
		o.FenceTTL = o.FenceTTL.Truncate(time.Millisecond)
		if o.FenceTTL < o.TTL {
			// A grant's token is read back from the counter when the
			// grantee takes it, up to a claim lease (at most TTL) later.
			return o, errors.New("lock: FenceTTL must be at least TTL (or negative: never expire)")
		}
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return o, errors.New("lock: Prefix must not contain '{' or '}'")
	}
	if o.WaitReplicas < 0 {
		return o, errors.New("lock: WaitReplicas must not be negative")
	}
	if o.WaitReplicasTimeout == 0 {
		o.WaitReplicasTimeout = 500 * time.Millisecond
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = min(max(o.TTL/100, 10*time.Millisecond), 50*time.Millisecond)
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	return o, nil
}

// entryLease is how long a waiting process's place in the queue lasts
// without a re-check.
func (o Options) entryLease() time.Duration { return 5 * o.RecheckInterval }

// claimLease is the lease of a grant to another process (the queue's
// line.lua, grant_lease): as long as the grantee's place would outlive a
// crash, so the grant blocks the lock no longer than that, and never
// longer than the TTL.
func (o Options) claimLease() time.Duration { return min(o.entryLease(), o.TTL) }

// fenceTTL is FenceTTL as the layers take it: 0 for a counter that never
// expires.
func (o Options) fenceTTL() time.Duration { return max(o.FenceTTL, 0) }

// burst is how many holds in a row a process may make while other
// processes wait: each token Redis issues to a process that waits for the
// lock comes with burst - 1 more reserved (the queue's line.lua), which it
// hands out with the lock to its own waiting goroutines without asking
// Redis (handoff's passHeld), and then it queues behind the others. 4 lets
// three hand-offs in four skip Redis, and bounds how long the others wait
// for their turn.
const burst = 4

// Observer is told what the Locker does, for metrics. Methods are called
// synchronously on the Locker's goroutines and must be fast. Embed
// NopObserver to implement only some of them.
type Observer interface {
	// Acquired: the lock was obtained after waiting wait; contended is true
	// when the first attempt found it taken.
	Acquired(name string, wait time.Duration, contended bool)
	// AcquireFailed: Acquire or TryAcquire gave up after wait.
	AcquireFailed(name string, wait time.Duration, err error)
	// Released: a holder released the lock after holding it for held. A
	// loss that the release found is reported (LeaseLost) before it.
	Released(name string, held time.Duration)
	// RenewalFailed: one background renewal failed; the lease may survive.
	RenewalFailed(name string, err error)
	// LeaseLost: a holder lost its lease before releasing.
	LeaseLost(name string)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) Acquired(string, time.Duration, bool)       {}
func (NopObserver) AcquireFailed(string, time.Duration, error) {}
func (NopObserver) Released(string, time.Duration)             {}
func (NopObserver) RenewalFailed(string, error)                {}
func (NopObserver) LeaseLost(string)                           {}
