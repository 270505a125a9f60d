package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
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
	if len(clients) < 3 {
		return nil, fmt.Errorf("lock: Redlock needs at least 3 independent Redis masters, got %d", len(clients))
	}
	if opts.WaitReplicas > 0 {
		return nil, errors.New("lock: WaitReplicas applies to one master with replicas, not to Redlock")
	}
	return newLocker(opts, func(o Options, id string) backend {
		return &redlock{nodes: clients, opts: o, quorum: len(clients)/2 + 1, acquireScript: o.scripts().acquire.Script}
	})
}

// redlock is the quorum backend.
type redlock struct {
	nodes         []redis.UniversalClient
	opts          Options
	quorum        int
	acquireScript *redis.Script

	// Node calls that outlive the node timeout finish in the background;
	// close waits for them.
	mu       sync.Mutex
	inflight int
	idle     *sync.Cond
}

func (r *redlock) subscribers() []redis.UniversalClient { return r.nodes }
func (r *redlock) confirm(context.Context, *Lock) error { return nil }

// drift is the allowance for clock rate differences and processing time
// that the reference implementation subtracts from every lease.
func (r *redlock) drift() time.Duration { return r.opts.TTL/100 + 2*time.Millisecond }

type nodeReply[T any] struct {
	v   T
	err error
}

// onEach runs call on every node in parallel and returns what each
// answered within the node timeout; a node that did not answer in time
// has the error context.DeadlineExceeded.
func onEach[T any](ctx context.Context, r *redlock, call func(ctx context.Context, i int, c redis.UniversalClient) (T, error)) []nodeReply[T] {
	replies := make([]nodeReply[T], len(r.nodes))
	type answer struct {
		i int
		nodeReply[T]
	}
	ch := make(chan answer, len(r.nodes))
	r.begin(len(r.nodes))
	for i, c := range r.nodes {
		go func() {
			defer r.end()
			nctx, cancel := context.WithTimeout(ctx, r.opts.NodeTimeout)
			defer cancel()
			v, err := call(nctx, i, c)
			ch <- answer{i, nodeReply[T]{v, err}}
		}()
	}
	timer := time.NewTimer(r.opts.NodeTimeout)
	defer timer.Stop()
	answered := make([]bool, len(r.nodes))
collect:
	for range r.nodes {
		select {
		case a := <-ch:
			replies[a.i], answered[a.i] = a.nodeReply, true
		case <-timer.C:
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	for i := range replies {
		if !answered[i] {
			replies[i].err = context.DeadlineExceeded
		}
	}
	return replies
}

// contend tries again: no queue spans the nodes (different nodes could
// grant to different processes, and none would have a quorum), so waiting
// processes try again when a release wakes them, or at the re-check. The
// process's ticket is not used: every try has a ticket of its own, as a
// failed one is withdrawn on every node.
func (r *redlock) contend(ctx context.Context, k keys, _ string, _ bool) (acquireResult, error) {
	return r.attempt(ctx, k)
}

// attempt takes the lock on a quorum of nodes under a new ticket, or
// undoes the attempt everywhere. Each node's client retries its own call,
// so a failed attempt is not tried again at once.
func (r *redlock) attempt(ctx context.Context, k keys) (acquireResult, error) {
	ticket := uuid.NewString()
	start := time.Now()
	replies := onEach(ctx, r, func(ctx context.Context, _ int, c redis.UniversalClient) ([]int64, error) {
		return r.acquireScript.Run(ctx, c, k.forTicket(ticket),
			ticket, r.opts.TTL.Milliseconds(), "redlock", string(modeNoQueue), r.opts.entryLease().Milliseconds(), k.channel,
			r.opts.fenceTTLms(),
		).Int64Slice()
	})
	var held []int
	var token int64
	var retryIn time.Duration
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case len(rep.v) == 3 && rep.v[0] == int64(acquired):
			held = append(held, i)
			token = max(token, rep.v[1])
		case len(rep.v) == 3 && rep.v[2] > 0:
			if d := ms(rep.v[2]); retryIn == 0 || d < retryIn {
				retryIn = d
			}
		}
	}
	deadline := start.Add(r.opts.TTL - r.drift())
	if len(held) >= r.quorum && time.Now().Before(deadline) && r.raiseFences(ctx, k, held, token) {
		return acquireResult{status: acquired, owner: ticket, token: token, deadline: deadline}, nil
	}
	// Not a quorum, or too late to be worth anything: undo everywhere.
	r.withdrawEverywhere(ctx, k, ticket)
	if answered := len(r.nodes) - len(errs); answered < r.quorum {
		return acquireResult{}, fmt.Errorf("lock: only %d of %d Redis nodes answered: %w", answered, len(r.nodes), errors.Join(errs...))
	}
	return acquireResult{status: waiting, retryIn: retryIn}, nil
}

// attemptAll is attempt for each lock of ks, all at once: each is a quorum
// of its own, decided on its own clock reading, so they cannot share one
// call per node as a single server's scripts share one pipeline.
func (r *redlock) attemptAll(ctx context.Context, ks []keys) ([]acquireResult, []error) {
	res, errs := make([]acquireResult, len(ks)), make([]error, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Go(func() { res[i], errs[i] = r.attempt(ctx, k) })
	}
	wg.Wait()
	return res, errs
}

// raiseFences sets the fence counter of the nodes in held to at least
// token, and reports whether a quorum of them did.
func (r *redlock) raiseFences(ctx context.Context, k keys, held []int, token int64) bool {
	want := make(map[int]bool, len(held))
	for _, i := range held {
		want[i] = true
	}
	tok := strconv.FormatInt(token, 10)
	replies := onEach(ctx, r, func(ctx context.Context, i int, c redis.UniversalClient) (bool, error) {
		if !want[i] {
			return false, nil
		}
		return true, raiseFenceScript.Run(ctx, c, []string{k.fence}, tok, r.opts.fenceTTLms()).Err()
	})
	raised := 0
	for _, rep := range replies {
		if rep.err == nil && rep.v {
			raised++
		}
	}
	return raised >= r.quorum
}

// withdrawEverywhere withdraws ticket on every node (redlock_withdraw.lua),
// without the caller's cancellation: it runs when an attempt failed or was
// cancelled, and to release. It returns how many nodes the ticket held.
func (r *redlock) withdrawEverywhere(ctx context.Context, k keys, ticket string) int {
	ctx = context.WithoutCancel(ctx)
	deleted := 0
	for _, rep := range onEach(ctx, r, func(ctx context.Context, _ int, c redis.UniversalClient) (int64, error) {
		return redlockWithdrawScript.Run(ctx, c, []string{k.lock, k.forTicket(ticket)[4]}, ticket, k.channel, r.opts.TTL.Milliseconds()).Int64()
	}) {
		if rep.err == nil && rep.v == 1 {
			deleted++
		}
	}
	return deleted
}

func (r *redlock) release(ctx context.Context, k keys, owner, _ string) (releaseResult, error) {
	deleted := r.withdrawEverywhere(ctx, k, owner)
	return releaseResult{released: deleted >= r.quorum}, nil
}

// releaseAll is release for each lock of rs, all at once.
func (r *redlock) releaseAll(ctx context.Context, rs []releaseReq) ([]releaseResult, []error) {
	res, errs := make([]releaseResult, len(rs)), make([]error, len(rs))
	var wg sync.WaitGroup
	for i, q := range rs {
		wg.Go(func() { res[i], errs[i] = r.release(ctx, q.k, q.owner, q.requeue) })
	}
	wg.Wait()
	return res, errs
}

func (r *redlock) withdraw(ctx context.Context, k keys, ticket string) error {
	r.withdrawEverywhere(ctx, k, ticket)
	return nil
}

// extend needs a quorum, within the lease it extends.
func (r *redlock) extend(ctx context.Context, k keys, owner string) (time.Time, bool, error) {
	start := time.Now()
	replies := onEach(ctx, r, func(ctx context.Context, _ int, c redis.UniversalClient) (int64, error) {
		return extendScript.Run(ctx, c, []string{k.lock}, owner, r.opts.TTL.Milliseconds()).Int64()
	})
	extended, refused := 0, 0
	var errs []error
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		case rep.v == 1:
			extended++
		default:
			refused++
		}
	}
	deadline := start.Add(r.opts.TTL - r.drift())
	switch {
	case extended >= r.quorum && time.Now().Before(deadline):
		return deadline, true, nil
	case len(r.nodes)-refused < r.quorum:
		return deadline, false, nil // a quorum says we are not the owner
	}
	return deadline, false, fmt.Errorf("lock: extended on %d of %d nodes: %w", extended, len(r.nodes), errors.Join(errs...))
}

func (r *redlock) begin(n int) {
	r.mu.Lock()
	r.inflight += n
	r.mu.Unlock()
}

func (r *redlock) end() {
	r.mu.Lock()
	r.inflight--
	if r.inflight == 0 && r.idle != nil {
		r.idle.Broadcast()
	}
	r.mu.Unlock()
}

// close waits for node calls still running in the background.
func (r *redlock) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idle == nil {
		r.idle = sync.NewCond(&r.mu)
	}
	for r.inflight > 0 {
		r.idle.Wait()
	}
}
