package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// single is one Redis deployment behind a UniversalClient: a server,
// Sentinel, or Cluster. It can hand the lock over in the release script,
// because one server decides who is next.
type single struct {
	client  redis.UniversalClient
	opts    Options
	id      string // the process's id in the locks' queues
	scripts *scriptSet

	// The scripts' constant arguments, converted to interfaces once:
	// go-redis would otherwise allocate for each, on every call.
	ttlArg, leaseArg, idArg, fenceTTLArg any
}

func newSingle(client redis.UniversalClient, opts Options, id string) *single {
	return &single{client: client, opts: opts, id: id, scripts: opts.scripts(),
		ttlArg: opts.TTL.Milliseconds(), leaseArg: opts.entryLease().Milliseconds(), idArg: id,
		fenceTTLArg: opts.fenceTTLms()}
}

// burst is how many holds in a row a process may make while other
// processes wait: a release's reply reserves burst - 1 tokens after the one
// it issues (release.lua), for hand-offs within the process that skip
// Redis (queue.passHeld). 4 lets three of four hand-offs be local, and
// bounds how long the others wait for their turn.
const burst = 4

var burstArg any = burst

// The acquire modes as interfaces, for the same reason.
var modeArgs = map[acquireMode]any{modeNoQueue: string(modeNoQueue), modeRegister: string(modeRegister), modeRefresh: string(modeRefresh)}

func (s *single) subscribers() []redis.UniversalClient { return []redis.UniversalClient{s.client} }
func (s *single) close()                               {}

// attempt is the uncontended acquire script (mode '0') under a new ticket.
// It is never sent twice (acquire says why): when it fails without a
// reply, the script may have run and taken the lock, or may still run, so
// the ticket is withdrawn (bsm/redislock leaves such a lock orphaned until
// its TTL), and the error says another attempt is safe.
func (s *single) attempt(ctx context.Context, k keys) (acquireResult, error) {
	ticket := uuid.NewString()
	res, err := s.acquire(ctx, k, ticket, modeNoQueue)
	if err != nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = s.withdraw(wctx, k, ticket)
		cancel()
		return res, undone{err}
	}
	return res, nil
}

// contend queues the process under ticket (mode '1'), or refreshes its
// place (mode '2'); a release script then hands the lock over.
func (s *single) contend(ctx context.Context, k keys, ticket string, refresh bool) (acquireResult, error) {
	mode := modeRegister
	if refresh {
		mode = modeRefresh
	}
	res, err := s.acquire(ctx, k, ticket, mode)
	res.queued = err == nil && res.status == waiting
	return res, err
}

// attemptAll is attempt for every lock of ks, each under a new ticket, in
// one pipeline: one round trip (a ClusterClient sends one pipeline to each
// master whose slots the keys fall in). Like attempt's, the scripts are
// never sent twice; one that fails without a reply has its ticket
// withdrawn, and its error is an undone.
func (s *single) attemptAll(ctx context.Context, ks []keys) ([]acquireResult, []error) {
	res, errs := make([]acquireResult, len(ks)), make([]error, len(ks))
	if len(ks) == 0 {
		return res, errs
	}
	sent := time.Now()
	tickets := make([]string, len(ks))
	cmds := make([]*redis.Cmd, len(ks))
	keysOf := func(i int) []string { return ks[i].forTicket(tickets[i]) }
	argsOf := func(i int) []any { return s.acquireArgs(ks[i], tickets[i], modeNoQueue) }
	for i := range ks {
		tickets[i] = uuid.NewString()
	}
	runAllOnce(ctx, s.client, s.scripts.acquire, cmds, keysOf, argsOf)
	for i, cmd := range cmds {
		v, err := cmd.Int64Slice()
		if err == nil {
			res[i], err = parseAcquire(v, tickets[i], sent)
			if err == nil {
				continue
			}
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = s.withdraw(wctx, ks[i], tickets[i])
		cancel()
		errs[i] = undone{err}
	}
	return res, errs
}

// acquireArgs is the acquire script's ARGV.
func (s *single) acquireArgs(k keys, ticket string, mode acquireMode) []any {
	return []any{ticket, s.ttlArg, s.idArg, modeArgs[mode], s.leaseArg, k.channelArg, s.fenceTTLArg}
}

func (s *single) acquire(ctx context.Context, k keys, ticket string, mode acquireMode) (acquireResult, error) {
	sent := time.Now()
	keys := k.forTicket(ticket)
	args := s.acquireArgs(k, ticket, mode)
	var cmd *redis.Cmd
	if mode != modeRefresh {
		// Never sent twice. A registration queues the process under its
		// ticket whatever that ticket went through before: run a second
		// time, after the ticket was granted, taken and released in
		// between (nothing in Redis remembers a released ticket), it would
		// queue the ticket again and could grant it the lock with nobody
		// to release it. An uncontended attempt (mode '0') run a second
		// time after its Lock was released would take the lock again, for
		// nobody. A failed call is abandoned instead: its ticket is
		// withdrawn (tryOnce, afterAttempt), and the tombstone makes a
		// late run of it fail.
		cmd = runOnce(ctx, s.client, s.scripts.acquire, keys, args...)
	} else {
		// Safe to run twice, so go-redis may retry it. Mode '2' refreshes
		// only an entry that still carries the ticket, and a grant removes
		// that entry: after the ticket was granted, a second run finds the
		// lock held by it (and extends it, as its holder does), or reports
		// the place lost and changes nothing.
		cmd = s.scripts.acquire.Run(ctx, s.client, keys, args...)
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return acquireResult{}, err
	}
	return parseAcquire(v, ticket, sent)
}

// parseAcquire reads the acquire script's reply to a request for ticket
// sent at sent.
func parseAcquire(v []int64, ticket string, sent time.Time) (acquireResult, error) {
	if len(v) != 3 {
		return acquireResult{}, fmt.Errorf("lock: acquire script replied %v", v)
	}
	r := acquireResult{status: acquireStatus(v[0]), token: v[1]}
	if r.status == acquired {
		r.owner = ticket
		// The lease started when the script ran, after we sent it.
		r.deadline = sent.Add(ms(v[2]))
	} else {
		r.retryIn = ms(v[2])
	}
	return r, nil
}

// release runs the release script once. Run twice with a ticket to queue,
// it would queue that ticket again after the first run granted it (and the
// grant's holder may have released it since). So a release is never sent
// twice: if it fails without a reply, the requeue ticket's fate is unknown
// (the Locker gives it up: requeueLost), and the release is asked again
// without a ticket to queue, which is safe to repeat. That second call
// deletes the lock if the first never ran. If it finds the lock gone or
// someone else's, the first may have released it or the lease may have
// ended: the Locker tells which from the Lock's deadline (Locker.release).
func (s *single) release(ctx context.Context, k keys, owner, requeue string) (releaseResult, error) {
	sent := time.Now()
	v, err := runOnce(ctx, s.client, s.scripts.release, k.forTicket(requeue), s.releaseArgs(k, owner, requeue)...).Slice()
	if err != nil {
		return s.releaseAgain(ctx, k, owner)
	}
	return parseRelease(v, requeue, sent, false)
}

// releaseAll is release for every lock of rs in one pipeline: one round
// trip. A call that fails without a reply is asked again on its own,
// without its ticket to queue, as release does.
func (s *single) releaseAll(ctx context.Context, rs []releaseReq) ([]releaseResult, []error) {
	res, errs := make([]releaseResult, len(rs)), make([]error, len(rs))
	if len(rs) == 0 {
		return res, errs
	}
	sent := time.Now()
	cmds := make([]*redis.Cmd, len(rs))
	keysOf := func(i int) []string { return rs[i].k.forTicket(rs[i].requeue) }
	argsOf := func(i int) []any { return s.releaseArgs(rs[i].k, rs[i].owner, rs[i].requeue) }
	runAllOnce(ctx, s.client, s.scripts.release, cmds, keysOf, argsOf)
	for i, cmd := range cmds {
		v, err := cmd.Slice()
		if err != nil {
			res[i], errs[i] = s.releaseAgain(ctx, rs[i].k, rs[i].owner)
			continue
		}
		res[i], errs[i] = parseRelease(v, rs[i].requeue, sent, false)
	}
	return res, errs
}

// releaseArgs is the release script's ARGV.
func (s *single) releaseArgs(k keys, owner, requeue string) []any {
	return []any{owner, s.idArg, requeue, s.ttlArg, s.leaseArg, k.channelArg, burstArg, s.fenceTTLArg}
}

// releaseAgain is the release asked again after a call that carried a
// ticket to queue got no reply: without the ticket, which is safe to
// repeat (go-redis may retry it). Its result says the ticket's fate is
// unknown (requeueLost).
func (s *single) releaseAgain(ctx context.Context, k keys, owner string) (releaseResult, error) {
	sent := time.Now()
	v, err := s.scripts.release.Run(ctx, s.client, k.forTicket(""), s.releaseArgs(k, owner, "")...).Slice()
	if err != nil {
		return releaseResult{requeueLost: true}, err
	}
	return parseRelease(v, "", sent, true)
}

// parseRelease reads the release script's reply to a release sent at sent
// that was to queue the process under requeue; lost says that an earlier
// call carrying a ticket got no reply.
func parseRelease(v []any, requeue string, sent time.Time, lost bool) (releaseResult, error) {
	if len(v) != 5 && len(v) != 6 {
		return releaseResult{requeueLost: lost}, fmt.Errorf("lock: release script replied %v", v)
	}
	r := releaseResult{requeueLost: lost}
	r.released = v[0] == int64(1)
	r.granted = v[1] == int64(1)
	r.queued = requeue != "" && !r.granted
	r.token, _ = v[2].(int64)
	ttl, _ := v[3].(int64)
	r.deadline = sent.Add(ms(ttl))
	r.ticket, _ = v[4].(string)
	if len(v) == 6 {
		r.last, _ = v[5].(int64)
	}
	return r, nil
}

func (s *single) withdraw(ctx context.Context, k keys, ticket string) error {
	return s.scripts.withdraw.Run(ctx, s.client, k.forTicket(ticket), s.id, ticket, k.channel, s.opts.TTL.Milliseconds(), s.fenceTTLArg).Err()
}

func (s *single) extend(ctx context.Context, k keys, owner string) (time.Time, bool, error) {
	sent := time.Now()
	n, err := extendScript.Run(ctx, s.client, []string{k.lock}, owner, s.ttlArg).Int64()
	return sent.Add(s.opts.TTL), n == 1, err
}

// confirm is replica acknowledgement (Redisson's default for a master with
// replicas): the lock is written on the master and replicated
// asynchronously, so a failover right after the acquisition can lose it.
// With Options.WaitReplicas set, the new holder extends
// its lease and runs WAIT on the same connection, in one round trip: WAIT
// returns once that many replicas have every write up to the extend,
// which includes the acquisition, however it came (a grant is written by
// the releaser's connection). If too few answer in time, the lock is
// released and the acquisition fails.
func (s *single) confirm(ctx context.Context, lk *Lock) error {
	if s.opts.WaitReplicas <= 0 {
		return nil
	}
	sent := time.Now()
	ext, acks, err := s.extendAndWait(ctx, lk, false)
	if err != nil && redis.HasErrorPrefix(ext.Err(), "NOSCRIPT") {
		ext, acks, err = s.extendAndWait(ctx, lk, true)
	}
	if err != nil {
		return fmt.Errorf("lock: confirm %q on replicas: %w", lk.name, err)
	}
	if n, _ := ext.Int64(); n != 1 {
		return fmt.Errorf("%w: %q was lost before its replicas confirmed it", ErrNotAcquired, lk.name)
	}
	if n, _ := acks.Int64(); n < int64(s.opts.WaitReplicas) {
		return fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v",
			ErrNotReplicated, lk.name, n, s.opts.WaitReplicas, s.opts.WaitReplicasTimeout)
	}
	if err := lk.extended(sent.Add(s.opts.TTL)); err != nil {
		return fmt.Errorf("lock: confirm %q on replicas: %w", lk.name, err)
	}
	return nil
}

// extendAndWait pipelines the extend script and WAIT, so that both run on
// one connection: WAIT counts the replicas that have this connection's
// last write. eval sends the script's source (after NOSCRIPT).
func (s *single) extendAndWait(ctx context.Context, lk *Lock, eval bool) (ext, acks *redis.Cmd, err error) {
	pipe := s.client.Pipeline()
	keys, args := []string{lk.k.lock}, []any{lk.owner, s.opts.TTL.Milliseconds()}
	if eval {
		ext = extendScript.Eval(ctx, pipe, keys, args...)
	} else {
		ext = extendScript.EvalSha(ctx, pipe, keys, args...)
	}
	acks = pipe.Do(ctx, "WAIT", s.opts.WaitReplicas, s.opts.WaitReplicasTimeout.Milliseconds())
	_, err = pipe.Exec(ctx)
	return ext, acks, err
}
