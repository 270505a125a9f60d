package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/core/once"
)

// Status is what a call for the process's turn found (lua/wait.lua).
type Status int

const (
	Waiting   Status = 0  // in line
	Taken     Status = 1  // the process holds the lock under the ticket
	PlaceLost Status = -1 // a refresh found no place: join again, under a new ticket
	Withdrawn Status = -2 // the ticket was withdrawn before the call arrived
)

// Turn is what a call for the process's turn found.
type Turn struct {
	Status   Status
	Token    int64         // Taken: the fencing token
	Deadline time.Time     // Taken: the lease lasts at least until then
	HeldFor  time.Duration // Waiting: how long the holder's lease still runs
}

// Join puts the process in the line of k under ticket, a new one, and
// takes the lock if it is free and the process's turn. A join is never
// sent twice: run again after the ticket was granted, taken and released
// (nothing in Redis remembers a released ticket), it would queue the
// ticket again and could give it the lock with nobody to release it. The
// caller withdraws a ticket whose join got no reply.
func (q *Queue) Join(ctx context.Context, k Keys, ticket string) (Turn, error) {
	sent := time.Now()
	cmd := once.Run(ctx, q.rdb, q.scripts.wait, q.cfg.RetryScriptCalls, k.scriptKeys(ticket), q.waitArgs(k, ticket, "join")...)
	return q.turn(cmd, sent)
}

// Refresh refreshes the process's place in the line of k under ticket, and
// takes a grant to it whose message was lost, or the lock if it is free
// and the process's turn (a holder whose lease ran out). It is safe to
// repeat, since it only refreshes an entry that still carries the ticket,
// and go-redis may.
func (q *Queue) Refresh(ctx context.Context, k Keys, ticket string) (Turn, error) {
	sent := time.Now()
	cmd := q.scripts.wait.Run(ctx, q.rdb, k.scriptKeys(ticket), q.waitArgs(k, ticket, "refresh")...)
	return q.turn(cmd, sent)
}

func (q *Queue) waitArgs(k Keys, ticket, mode string) []any {
	return []any{ticket, mode, q.pid, q.ttl, q.lease, k.Channel, q.fenceTTL, q.reserve}
}

// turn reads the reply {status, token, ms} of a wait sent at sent.
func (q *Queue) turn(cmd *redis.Cmd, sent time.Time) (Turn, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return Turn{}, err
	}
	if len(v) != 3 {
		return Turn{}, fmt.Errorf("lock: wait script replied %v", v)
	}
	t := Turn{Status: Status(v[0]), Token: v[1]}
	if t.Status == Taken {
		t.Deadline = sent.Add(core.Ms(v[2])) // the lease began after the call was sent
	} else {
		t.HeldFor = core.Ms(v[2])
	}
	return t, nil
}

// Release is one lock of a call to Release.
type Release struct {
	K       Keys
	Owner   string
	Requeue string // the ticket to put the process back in line under; "" for none
	// Direct: the lock was taken directly (core's acquire), and most such
	// locks are released with nobody waiting: try the cheaper unlock.lua
	// first, and release.lua only if processes wait.
	Direct bool
}

// Released is what a release found.
type Released struct {
	Released bool      // the owner's lock was deleted
	Queued   bool      // the process stands in line under the requeue ticket
	Granted  bool      // the lock went to a ticket of this process
	Ticket   string    // Granted: that ticket
	Token    int64     // Granted: its fencing token
	Last     int64     // Granted: the last token reserved with it
	Deadline time.Time // Granted: its lease lasts at least until then
	// RequeueLost: the call that carried the requeue ticket got no reply,
	// so that ticket may or may not be in line (or even granted): the
	// caller withdraws it.
	RequeueLost bool
}

// Release releases each lock of rs, in one pipeline (lua/release.lua): it
// deletes the owner's lock, gives it to the next process in line, and
// puts this process back in line under the requeue ticket, or keeps the
// lock for it if nobody else waits. A release is never sent twice: run
// again with a ticket to queue, it would queue that ticket again after the
// first run gave it the lock. When a call gets no reply, the release is
// asked again without a ticket to queue, which is safe to repeat, and the
// requeue ticket's fate is unknown (RequeueLost). If that second call finds
// the lock gone or someone else's, the first may have released it or the
// lease may have ended: the caller tells which from the lease's deadline.
func (q *Queue) Release(ctx context.Context, rs []Release) ([]Released, []error) {
	res, errs := make([]Released, len(rs)), make([]error, len(rs))
	if len(rs) == 1 && rs[0].Direct && rs[0].Requeue == "" {
		// The common case alone, without the pipeline's bookkeeping.
		r := rs[0]
		n, err := once.Run(ctx, q.rdb, q.scripts.unlock, q.cfg.RetryScriptCalls, []string{r.K.Lock, r.K.Queue}, r.Owner).Int64()
		switch {
		case err != nil:
			res[0], errs[0] = q.releaseAgain(ctx, r)
			return res, errs
		case n != -1:
			res[0].Released = n == 1
			return res, errs
		}
		rs = []Release{{K: r.K, Owner: r.Owner}} // processes wait: release.lua hands the lock over
	}
	var rest []int // the releases left for release.lua
	var unlocks []int
	for i, r := range rs {
		if r.Direct && r.Requeue == "" {
			unlocks = append(unlocks, i)
		} else {
			rest = append(rest, i)
		}
	}
	if len(unlocks) > 0 {
		cmds := make([]*redis.Cmd, len(unlocks))
		run(ctx, q, q.scripts.unlock, cmds,
			func(j int) []string { return []string{rs[unlocks[j]].K.Lock, rs[unlocks[j]].K.Queue} },
			func(j int) []any { return []any{rs[unlocks[j]].Owner} })
		for j, cmd := range cmds {
			i := unlocks[j]
			switch n, err := cmd.Int64(); {
			case err != nil:
				// It may have run: ask again, in a form safe to repeat.
				res[i], errs[i] = q.releaseAgain(ctx, rs[i])
			case n == -1:
				rest = append(rest, i) // processes wait: release.lua hands the lock over
			default:
				res[i].Released = n == 1
			}
		}
	}
	if len(rest) == 0 {
		return res, errs
	}
	cmds := make([]*redis.Cmd, len(rest))
	sent := time.Now()
	run(ctx, q, q.scripts.release, cmds,
		func(j int) []string { return rs[rest[j]].K.scriptKeys(rs[rest[j]].Requeue) },
		func(j int) []any { return q.releaseArgs(rs[rest[j]], rs[rest[j]].Requeue) })
	for j, cmd := range cmds {
		i := rest[j]
		if n, err := cmd.Int64(); err == nil {
			res[i].Released = n == 1 // the common case's reply
		} else if v, err := cmd.Slice(); err != nil {
			res[i], errs[i] = q.releaseAgain(ctx, rs[i])
		} else {
			res[i], errs[i] = released(v, rs[i].Requeue, sent, false)
		}
	}
	return res, errs
}

// run sends len(cmds) calls of s that must not run twice: alone, or in one
// pipeline.
func run(ctx context.Context, q *Queue, s *once.Script, cmds []*redis.Cmd, keys func(int) []string, args func(int) []any) {
	if len(cmds) == 1 {
		cmds[0] = once.Run(ctx, q.rdb, s, q.cfg.RetryScriptCalls, keys(0), args(0)...)
		return
	}
	once.RunAll(ctx, q.rdb, s, cmds, keys, args)
}

func (q *Queue) releaseArgs(r Release, requeue string) []any {
	return []any{r.Owner, requeue, q.pid, q.ttl, q.lease, r.K.Channel, q.fenceTTL, q.reserve}
}

// releaseAgain asks a release again, without a ticket to queue, after a
// call that may have carried one got no reply; go-redis may retry it.
func (q *Queue) releaseAgain(ctx context.Context, r Release) (Released, error) {
	sent := time.Now()
	cmd := q.scripts.release.Run(ctx, q.rdb, r.K.scriptKeys(""), q.releaseArgs(r, "")...)
	if n, err := cmd.Int64(); err == nil {
		return Released{Released: n == 1, RequeueLost: true}, nil
	}
	v, err := cmd.Slice()
	if err != nil {
		return Released{RequeueLost: true}, err
	}
	return released(v, "", sent, true)
}

// released reads the reply 1 or {released, granted, token, ms, ticket[, last]}
// of a release sent at sent that was to queue the process under requeue;
// lost says that an earlier call that carried it got no reply.
func released(v []any, requeue string, sent time.Time, lost bool) (Released, error) {
	r := Released{RequeueLost: lost}
	if len(v) != 5 && len(v) != 6 {
		return r, fmt.Errorf("lock: release script replied %v", v)
	}
	r.Released, r.Granted = v[0] == int64(1), v[1] == int64(1)
	r.Queued = requeue != "" && !r.Granted
	r.Token, _ = v[2].(int64)
	ms, _ := v[3].(int64)
	r.Deadline = sent.Add(core.Ms(ms))
	r.Ticket, _ = v[4].(string)
	if len(v) == 6 {
		r.Last, _ = v[5].(int64)
	}
	return r, nil
}

// Withdraw gives each tickets[i] of ks[i] up, in one pipeline
// (lua/withdraw.lua): it leaves the ticket's tombstone, takes the process
// out of the line if it stands there under the ticket, and passes on a
// lock the ticket holds. It is safe to repeat, and go-redis may.
func (q *Queue) Withdraw(ctx context.Context, ks []Keys, tickets []string) []error {
	errs := make([]error, len(ks))
	if len(ks) == 0 {
		return errs
	}
	args := func(i int) []any { return []any{tickets[i], q.pid, q.ttl, ks[i].Channel, q.fenceTTL, q.reserve} }
	if len(ks) == 1 {
		errs[0] = q.scripts.withdraw.Run(ctx, q.rdb, ks[0].scriptKeys(tickets[0]), args(0)...).Err()
		return errs
	}
	cmds := make([]*redis.Cmd, len(ks))
	once.RunAll(ctx, q.rdb, q.scripts.withdraw, cmds, func(i int) []string { return ks[i].scriptKeys(tickets[i]) }, args)
	for i, cmd := range cmds {
		errs[i] = cmd.Err()
	}
	return errs
}
