// Package lock is a Redis distributed lock: SET NX PX under a fresh owner
// UUID to acquire, compare-and-delete to release, a lease renewed in the
// background, a fencing token per acquisition, and waiters served in turn
// instead of polling. It works with anything behind a
// redis.UniversalClient (one server, Sentinel, or Cluster; New) and over
// several independent masters (Redlock; NewRedlock). It needs Redis 6.2
// or later.
//
//	locker, err := lock.New(client, lock.Options{})
//	...
//	err = locker.Do(ctx, "product:42", func(ctx context.Context, lk *lock.Lock) error {
//		// Exclusive while the lease holds; ctx is cancelled if it is lost.
//		// The resource refuses writes with a token older than one it has seen.
//		return stock.WriteIfNewer(ctx, lk.Token(), newStock)
//	})
//
// # Guarantees
//
//   - Mutual exclusion: while its lease lasts, a Lock is the only holder
//     of its name in the Redis deployment.
//   - No deadlock: the lease is set with the lock, so a holder that dies
//     frees it after the TTL; one that lives renews it (Options.TTL,
//     RenewInterval).
//   - Only the owner releases or extends: each acquisition stores its own
//     UUID, checked in the same script that deletes or extends the key.
//   - A lost lease is reported: Lost closes, and every context from
//     Lock.Context or Do is cancelled with ErrLeaseLost. Release (and Do)
//     returns nil only for a hold checked against Redis after it ended
//     and found exclusive, and ErrLeaseLost for one that overlapped
//     another holder's.
//   - Fencing tokens increase: each acquisition's token is larger than
//     every earlier token of the name, also across a Redis restart or
//     failover, as long as the clock of the server that issues the next
//     token has not stepped back past the last one. A resource that
//     refuses older tokens stays correct whatever the lock gets wrong.
//   - Waiting is fair and bounded: goroutines of a process wait in turn,
//     processes wait in a queue in Redis, and a release hands the lock to
//     the next in line in the same script; a process holds at most 4
//     times in a row while another waits.
//
// What it does not guarantee: Redis can lose a lock (a restart without
// persistence, a failover to a replica that had not received it), and a
// process paused past its lease learns of the loss only when it runs
// again; two clients then believe they hold the lock, and only the fence
// stops the stale one's writes. Redlock narrows the first with a quorum
// but rests on bounded clock drift. Options.WaitReplicas narrows it for a
// master with replicas. The repository runs each such fault on real
// processes, with the fence on and off: a cut or slow link, a clock jump
// under Redlock, a Sentinel split brain (docs/checks.md; demo -matrix).
//
// The design, step by step, with the failure each step prevents and the
// order in which to read the code, is docs/lock.md in this repository.
package lock
