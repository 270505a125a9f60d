package lock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The Go side of each script: arguments in, typed reply out.

type acquireMode string

const (
	modeNoQueue  acquireMode = "0" // take it if free and nobody is queued
	modeRegister acquireMode = "1" // also queue this process under a new ticket
	modeRefresh  acquireMode = "2" // refresh our place; fail if it is gone
)

type acquireStatus int

const (
	waiting   acquireStatus = 0
	acquired  acquireStatus = 1
	placeLost acquireStatus = -1 // modeRefresh found no entry: start over with a new ticket
	voided    acquireStatus = -2 // the ticket was withdrawn before this request arrived
)

type acquireResult struct {
	status acquireStatus
	token  int64
	pttl   time.Duration // remaining lease of whoever holds the lock
}

func (l *Locker) runAcquire(ctx context.Context, k keys, ticket string, mode acquireMode) (acquireResult, error) {
	v, err := acquireScript.Run(ctx, l.client, k.forTicket(ticket),
		ticket, l.opts.TTL.Milliseconds(), l.id, string(mode), l.opts.entryLease().Milliseconds(), k.channel,
	).Int64Slice()
	if err != nil {
		return acquireResult{}, err
	}
	if len(v) != 3 {
		return acquireResult{}, fmt.Errorf("lock: acquire script replied %v", v)
	}
	return acquireResult{status: acquireStatus(v[0]), token: v[1], pttl: time.Duration(v[2]) * time.Millisecond}, nil
}

type releaseResult struct {
	released bool          // the caller's lock was deleted
	granted  bool          // the lock went to a ticket of this process
	token    int64         // that grant's fencing token
	ttl      time.Duration // and its lease
	ticket   string
}

// runRelease deletes owner's lock and hands the lock on. requeue, when not
// empty, queues this process under that ticket first (it has more local
// waiters), so the lock may come straight back to it.
func (l *Locker) runRelease(ctx context.Context, k keys, owner, requeue string) (releaseResult, error) {
	v, err := releaseScript.Run(ctx, l.client, k.forTicket(owner),
		owner, l.id, requeue, l.opts.TTL.Milliseconds(), l.opts.entryLease().Milliseconds(), k.channel,
	).Slice()
	if err != nil {
		return releaseResult{}, err
	}
	if len(v) != 5 {
		return releaseResult{}, fmt.Errorf("lock: release script replied %v", v)
	}
	var r releaseResult
	r.released = v[0] == int64(1)
	r.granted = v[1] == int64(1)
	r.token, _ = v[2].(int64)
	ttl, _ := v[3].(int64)
	r.ttl = time.Duration(ttl) * time.Millisecond
	r.ticket, _ = v[4].(string)
	return r, nil
}

// runWithdraw voids ticket: takes this process out of the lock's queue if
// it stands there under ticket, passes on a grant the ticket may already
// have received, and makes a late acquire with ticket fail.
func (l *Locker) runWithdraw(ctx context.Context, k keys, ticket string) error {
	return withdrawScript.Run(ctx, l.client, k.forTicket(ticket), l.id, ticket, k.channel, l.opts.TTL.Milliseconds()).Err()
}

// runExtend resets owner's lease to the TTL; false means owner no longer
// holds the lock.
func (l *Locker) runExtend(ctx context.Context, k keys, owner string) (bool, error) {
	n, err := extendScript.Run(ctx, l.client, []string{k.lock}, owner, l.opts.TTL.Milliseconds()).Int64()
	return n == 1, err
}

// parseGrant splits a grant message: "<process id> <ticket> <token>".
func parseGrant(payload string) (pid, ticket string, token int64, ok bool) {
	pid, rest, ok1 := strings.Cut(payload, " ")
	ticket, tok, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return "", "", 0, false
	}
	token, err := strconv.ParseInt(tok, 10, 64)
	return pid, ticket, token, err == nil
}
