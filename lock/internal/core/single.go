package core

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core/once"
)

// Config is what Single needs of the lock's options, in the units the
// scripts take.
type Config struct {
	TTL        time.Duration // the lease of each acquisition
	EntryLease time.Duration // a queued process's place lasts this long unrefreshed
	FenceTTLms int64         // the fence counter's lifetime in ms; 0: for ever
	Scripts    *Scripts      // nil: SafeScripts
	// RetryScriptCalls (a test's control) lets go-redis send every script
	// call again when its reply is lost.
	RetryScriptCalls bool
}

// Burst is how many holds in a row a process may make while other
// processes wait: a release's reply reserves Burst - 1 tokens after the
// one it issues (release.lua), for hand-offs within the process that skip
// Redis (package fair). 4 lets three hand-offs in four skip Redis, and
// bounds how long the others wait for their turn.
const Burst = 4

// Single is one Redis deployment behind a UniversalClient: a server,
// Sentinel, or Cluster. One server decides who is next, so the release
// script can hand the lock over.
type Single struct {
	client  redis.UniversalClient
	cfg     Config
	id      string // the process's id in the locks' queues
	scripts *Scripts
	// The scripts' constant arguments, converted to interfaces once:
	// go-redis would otherwise allocate for each, on every call.
	ttl, lease, pid, fenceTTL, burst any
}

// modes of the acquire script, as arguments.
var (
	modeNoQueue  any = "0" // take it if free and nobody is queued
	modeRegister any = "1" // also queue this process under a new ticket
	modeRefresh  any = "2" // refresh our place; fail if it is gone
)

// NewSingle returns the backend of the deployment behind client, for the
// process id.
func NewSingle(client redis.UniversalClient, cfg Config, id string) *Single {
	if cfg.Scripts == nil {
		cfg.Scripts = SafeScripts
	}
	return &Single{client: client, cfg: cfg, id: id, scripts: cfg.Scripts,
		ttl: cfg.TTL.Milliseconds(), lease: cfg.EntryLease.Milliseconds(), pid: id,
		fenceTTL: cfg.FenceTTLms, burst: Burst}
}

func (s *Single) Subscribers() []redis.UniversalClient { return []redis.UniversalClient{s.client} }

// Confirm has nothing to confirm on one deployment; package replicas
// waits for its replicas.
func (s *Single) Confirm(_ context.Context, ks []Keys, _ []string) ([]time.Time, []error) {
	return make([]time.Time, len(ks)), make([]error, len(ks))
}

// Attempt is the uncontended acquire (mode '0') under a new ticket. It is
// never sent twice (run twice after its Lock was released, it would take
// the lock again, for nobody). When it fails without a reply it may have
// run, or may still run, so the ticket is withdrawn: the tombstone makes a
// late run fail (bsm/redislock leaves such a lock orphaned until its TTL).
func (s *Single) Attempt(ctx context.Context, k Keys) (AcquireResult, error) {
	ticket := uuid.NewString()
	sent := time.Now()
	v, err := once.Run(ctx, s.client, s.scripts.Acquire, s.cfg.RetryScriptCalls, k.ForTicket(ticket), s.acquireArgs(k, ticket, modeNoQueue)...).Int64Slice()
	return s.attempted(ctx, k, ticket, sent, v, err)
}

// AttemptAll is Attempt for every lock of ks in one pipeline: one round
// trip (a ClusterClient sends one pipeline to each master involved).
func (s *Single) AttemptAll(ctx context.Context, ks []Keys) ([]AcquireResult, []error) {
	res, errs := make([]AcquireResult, len(ks)), make([]error, len(ks))
	tickets, cmds := make([]string, len(ks)), make([]*redis.Cmd, len(ks))
	for i := range ks {
		tickets[i] = uuid.NewString()
	}
	sent := time.Now()
	if len(ks) > 0 {
		once.RunAll(ctx, s.client, s.scripts.Acquire, cmds,
			func(i int) []string { return ks[i].ForTicket(tickets[i]) },
			func(i int) []any { return s.acquireArgs(ks[i], tickets[i], modeNoQueue) })
	}
	var undo []int
	for i, cmd := range cmds {
		v, err := cmd.Int64Slice()
		if err == nil {
			if res[i], err = parseAcquire(v, tickets[i], sent); err == nil {
				continue
			}
		}
		errs[i] = Undone{err}
		undo = append(undo, i)
	}
	if len(undo) > 0 {
		// The attempts that came back without a reply are withdrawn
		// together, within what is left of the call's own time (and at
		// most ReleaseTimeout): when Redis stops answering, a round of
		// many locks waits out one timeout, not one per lock.
		wks, wts := make([]Keys, len(undo)), make([]string, len(undo))
		for j, i := range undo {
			wks[j], wts[j] = ks[i], tickets[i]
		}
		wctx, cancel := withdrawContext(ctx)
		defer cancel()
		_ = s.WithdrawAll(wctx, wks, wts)
	}
	return res, errs
}

// attempted reads an attempt's reply, and withdraws its ticket if it came
// back without one.
func (s *Single) attempted(ctx context.Context, k Keys, ticket string, sent time.Time, v []int64, err error) (AcquireResult, error) {
	if err == nil {
		var r AcquireResult
		if r, err = parseAcquire(v, ticket, sent); err == nil {
			return r, nil
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	_ = s.Withdraw(wctx, k, ticket)
	return AcquireResult{}, Undone{err}
}

// withdrawContext is the context of the withdrawals after a call under
// ctx failed: it outlives ctx's cancellation but not its deadline, so a
// round that failed ends on time, and lasts at most ReleaseTimeout. It
// grants at least withdrawFloor, enough to send the withdrawals when the
// deadline has just passed (a Redis that stopped answering runs them,
// after the attempts, once it answers again); a withdrawal not made in
// time leaves its lock to its lease's TTL.
func withdrawContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(ReleaseTimeout)
	if d, ok := ctx.Deadline(); ok {
		if floor := time.Now().Add(withdrawFloor); d.Before(floor) {
			d = floor
		}
		if d.Before(end) {
			end = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

const withdrawFloor = 100 * time.Millisecond

// Contend queues the process under ticket (mode '1'), or refreshes its
// place (mode '2'); a release script then hands the lock over. A
// registration is never sent twice: run again after the ticket was
// granted, taken and released (nothing in Redis remembers a released
// ticket), it would queue the ticket again and could grant it the lock
// with nobody to release it. A refresh is safe to repeat, since it only
// refreshes an entry that still carries the ticket, and go-redis may.
func (s *Single) Contend(ctx context.Context, k Keys, ticket string, refresh bool) (AcquireResult, error) {
	sent := time.Now()
	keys := k.ForTicket(ticket)
	var cmd *redis.Cmd
	if refresh {
		cmd = s.scripts.Acquire.Run(ctx, s.client, keys, s.acquireArgs(k, ticket, modeRefresh)...)
	} else {
		cmd = once.Run(ctx, s.client, s.scripts.Acquire, s.cfg.RetryScriptCalls, keys, s.acquireArgs(k, ticket, modeRegister)...)
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return AcquireResult{}, err
	}
	r, err := parseAcquire(v, ticket, sent)
	r.Queued = err == nil && r.Status == Waiting
	return r, err
}

func (s *Single) acquireArgs(k Keys, ticket string, mode any) []any {
	return []any{ticket, s.ttl, s.pid, mode, s.lease, k.channelArg, s.fenceTTL}
}

// parseAcquire reads the reply {status, token, ms} to a request for ticket
// sent at sent.
func parseAcquire(v []int64, ticket string, sent time.Time) (AcquireResult, error) {
	if len(v) != 3 {
		return AcquireResult{}, fmt.Errorf("lock: acquire script replied %v", v)
	}
	r := AcquireResult{Status: Status(v[0]), Token: v[1]}
	if r.Status == Acquired {
		r.Owner = ticket
		r.Deadline = sent.Add(Ms(v[2])) // the lease started after we sent it
	} else {
		r.RetryIn = Ms(v[2])
	}
	return r, nil
}

// Release runs the release script once. Run twice with a ticket to queue,
// it would queue that ticket again after the first run granted it. So when
// it fails without a reply, the requeue ticket's fate is unknown
// (RequeueLost), and the release is asked again without one, which is
// safe to repeat. If that second call finds the lock gone or someone
// else's, the first may have released it or the lease may have ended: the
// caller tells which from the lease's deadline.
func (s *Single) Release(ctx context.Context, k Keys, owner, requeue string) (ReleaseResult, error) {
	sent := time.Now()
	v, err := once.Run(ctx, s.client, s.scripts.Release, s.cfg.RetryScriptCalls, k.ForTicket(requeue), s.releaseArgs(k, owner, requeue)...).Slice()
	if err != nil {
		return s.releaseAgain(ctx, k, owner)
	}
	return parseRelease(v, requeue, sent, false)
}

// ReleaseAll is Release for every lock of rs in one pipeline.
func (s *Single) ReleaseAll(ctx context.Context, rs []ReleaseReq) ([]ReleaseResult, []error) {
	res, errs := make([]ReleaseResult, len(rs)), make([]error, len(rs))
	cmds := make([]*redis.Cmd, len(rs))
	sent := time.Now()
	if len(rs) > 0 {
		once.RunAll(ctx, s.client, s.scripts.Release, cmds,
			func(i int) []string { return rs[i].K.ForTicket(rs[i].Requeue) },
			func(i int) []any { return s.releaseArgs(rs[i].K, rs[i].Owner, rs[i].Requeue) })
	}
	for i, cmd := range cmds {
		if v, err := cmd.Slice(); err != nil {
			res[i], errs[i] = s.releaseAgain(ctx, rs[i].K, rs[i].Owner)
		} else {
			res[i], errs[i] = parseRelease(v, rs[i].Requeue, sent, false)
		}
	}
	return res, errs
}

func (s *Single) releaseArgs(k Keys, owner, requeue string) []any {
	return []any{owner, s.pid, requeue, s.ttl, s.lease, k.channelArg, s.burst, s.fenceTTL}
}

// releaseAgain asks the release again, without a ticket to queue, after a
// call that carried one got no reply; go-redis may retry it.
func (s *Single) releaseAgain(ctx context.Context, k Keys, owner string) (ReleaseResult, error) {
	sent := time.Now()
	v, err := s.scripts.Release.Run(ctx, s.client, k.ForTicket(""), s.releaseArgs(k, owner, "")...).Slice()
	if err != nil {
		return ReleaseResult{RequeueLost: true}, err
	}
	return parseRelease(v, "", sent, true)
}

// parseRelease reads the reply {released, granted, token, ttl, ticket[,
// last]} to a release sent at sent that was to queue the process under
// requeue; lost says that an earlier call carrying a ticket got no reply.
func parseRelease(v []any, requeue string, sent time.Time, lost bool) (ReleaseResult, error) {
	r := ReleaseResult{RequeueLost: lost}
	if len(v) != 5 && len(v) != 6 {
		return r, fmt.Errorf("lock: release script replied %v", v)
	}
	r.Released, r.Granted = v[0] == int64(1), v[1] == int64(1)
	r.Queued = requeue != "" && !r.Granted
	r.Token, _ = v[2].(int64)
	ttl, _ := v[3].(int64)
	r.Deadline = sent.Add(Ms(ttl))
	r.Ticket, _ = v[4].(string)
	if len(v) == 6 {
		r.Last, _ = v[5].(int64)
	}
	return r, nil
}

// Withdraw is safe to repeat (go-redis may): it leaves the ticket's
// tombstone, takes it out of the queue, and passes on a lock it holds.
func (s *Single) Withdraw(ctx context.Context, k Keys, ticket string) error {
	return s.scripts.Withdraw.Run(ctx, s.client, k.ForTicket(ticket), s.withdrawArgs(k, ticket)...).Err()
}

// WithdrawAll is Withdraw for every ticket of tickets in one pipeline.
func (s *Single) WithdrawAll(ctx context.Context, ks []Keys, tickets []string) []error {
	errs := make([]error, len(ks))
	if len(ks) == 0 {
		return errs
	}
	cmds := make([]*redis.Cmd, len(ks))
	once.RunAll(ctx, s.client, s.scripts.Withdraw, cmds,
		func(i int) []string { return ks[i].ForTicket(tickets[i]) },
		func(i int) []any { return s.withdrawArgs(ks[i], tickets[i]) })
	for i, cmd := range cmds {
		errs[i] = cmd.Err()
	}
	return errs
}

func (s *Single) withdrawArgs(k Keys, ticket string) []any {
	return []any{s.pid, ticket, k.channelArg, s.ttl, s.fenceTTL}
}

// Extend resets owner's lease, only on the existing key: it never
// re-creates a lock that expired (someone else may hold it by now).
func (s *Single) Extend(ctx context.Context, k Keys, owner string) (time.Time, bool, error) {
	sent := time.Now()
	n, err := ExtendScript.Run(ctx, s.client, []string{k.Lock}, owner, s.ttl).Int64()
	return sent.Add(s.cfg.TTL), n == 1, err
}
