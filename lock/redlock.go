package lock

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/backend"
	"github.com/seckill-ref/seckill/lock/internal/redlock"
)

// NewRedlock returns a Locker whose locks live on N independent Redis
// masters (no replication between them; N odd, typically 3 or 5), following
// the Redlock algorithm of redis.io ("Distributed Locks with Redis"):
//
//   - Acquire tries every node in parallel, each with a short timeout
//     (Options.NodeTimeout), so a dead node costs that much and no more.
//   - It holds the lock only with a quorum of N/2+1 nodes, and only while
//     the lease it can vouch for is positive: TTL minus the time the
//     attempt took minus a drift allowance of TTL/100 + 2 ms, all measured
//     on Go's monotonic clock from before the first request.
//   - A failed attempt is undone on every node, also on those that did not
//     answer: the request may have run and its reply been lost, or it may
//     still arrive (the ticket's tombstone then makes it fail).
//   - Extend and renewal need a quorum too; without one, the lease is lost
//     and the holder is told.
//   - Fencing tokens: each node issues its clock in µs, or its last token
//     plus one if that is larger, in the acquire script; the holder takes the
//     largest over its quorum and raises the counter of every node it
//     holds to it before returning. Any two quorums share a node, so the
//     next holder's token is larger: the shared node's counter is at
//     least the last token, or, if that node came back without it
//     (restarted empty or from a stale snapshot), its clock is past the
//     last token, under the clock assumption of Lock.Token. The raise
//     covers nodes whose clocks are behind the others'.
//
// Give each node a client that answers within NodeTimeout or fails:
// ContextTimeoutEnabled (so the per-node deadline bounds reads),
// MaxRetries -1 and DialerRetries 1 (so a dead node is not retried inside
// one call). Otherwise a call to a dead node takes the whole NodeTimeout
// every time, and the lock slows down while a minority is down.
//
// Hand-off: a release wakes the waiters of every process (a message on each
// node); one goroutine per process and lock tries again, so waiting is not
// polling. Grants cannot be handed over in a script as with one server:
// different nodes could grant to different processes, and none would have a
// quorum.
//
// What this does not guarantee. Redlock's safety rests on timing: a lease
// is measured on the client's clock, and a holder paused (GC, swap, a
// SIGSTOP) beyond its lease, or nodes whose clocks jump, can leave two
// holders believing they hold the lock (Martin Kleppmann, "How to do
// distributed locking", 2016; antirez's reply, "Is Redlock safe?", argues
// that the assumptions are reasonable in practice). Neither side disputes
// that a paused holder must not be trusted with writes. That is why the
// tokens matter more than the lock: a resource that refuses writes with an
// older token than it has seen stays safe whatever the lock gets wrong. The
// seckill service's purchase does exactly that (internal/seckill).
func NewRedlock(clients []redis.UniversalClient, opts Options) (*Locker, error) {
	return newRedlock(clients, opts, testControls{})
}

func newRedlock(clients []redis.UniversalClient, opts Options, tc testControls) (*Locker, error) {
	if len(clients) < 3 {
		return nil, fmt.Errorf("lock: Redlock needs at least 3 independent Redis masters, got %d", len(clients))
	}
	if opts.WaitReplicas > 0 {
		return nil, errors.New("lock: WaitReplicas applies to one master with replicas, not to Redlock")
	}
	return newLocker(opts, tc, func(o Options, _ string, goCall func(func())) backend.Backend {
		return backend.Quorum(redlock.New(clients, redlock.Config{
			TTL: o.TTL, FenceTTL: o.fenceTTL(), NodeTimeout: o.NodeTimeout, Scripts: o.scripts(tc).core, Go: goCall,
		}))
	})
}
