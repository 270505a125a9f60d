// Package lock is a Redis distributed lock with fencing tokens, lease
// renewal and queued hand-off, built on github.com/redis/go-redis/v9. It
// works with anything behind a redis.UniversalClient (one server, Sentinel,
// or Cluster; New), and over several independent masters (Redlock;
// NewRedlock). It needs Redis 6.2 or later (the token is stored with SET
// ... GET).
//
//	locker, err := lock.New(client, lock.Options{})
//	...
//	err = locker.Do(ctx, "product:42", func(ctx context.Context, lk *lock.Lock) error {
//		// Exclusive while the lease holds; ctx ends if it is lost.
//		// Pass lk.Token() to the resource, which refuses older tokens.
//		return nil
//	})
//
// # Requirements, and the step that meets each
//
// The usual write-ups of the Redis lock (see References) list four
// requirements. Here is how each is met, and which common wrong
// implementation fails it; package lock/antipattern keeps those, and its
// tests make each fail.
//
// Mutual exclusion. Acquiring is SET key owner NX PX ttl in effect: one
// atomic command that succeeds only if the key does not exist. (It runs
// inside the acquire script, which also issues the fencing token and
// serves the wait queue, but the rule is the same.)
//
// No deadlock. The lease (PX ttl) is set in the same command as the lock.
// The first common wrong lock, SETNX then EXPIRE, leaves a lock that never
// expires when the client dies between the two commands
// (antipattern.SetNXThenExpire). The second, storing an expiry timestamp
// and taking over with GETSET, trusts every client's clock: a client whose
// clock runs ahead takes a live lock (antipattern.ExpiryTimestamp). Here
// only the Redis server's clock decides when a lease ends.
//
// Only the owner unlocks. Every acquisition from Redis stores a fresh UUID
// (Lock.Owner; the few Locks a process passes on among its own goroutines,
// below, keep it), and Release deletes the key only if it still holds that UUID, comparing
// and deleting in one Lua script. The common wrong unlocks, a plain DEL
// (antipattern.PlainDelete) and GET then DEL (antipattern.GetThenDelete),
// delete the lock of whoever took it after the caller's lease expired: in
// a flash-sale endpoint, the next buyer's critical section is then no
// longer exclusive. Extend is owner-checked too, and only resets
// the TTL of an existing key: it never re-creates a lock that expired.
//
// Fault tolerance. A single Redis server is a single point of failure, and
// replication is asynchronous: a failover can lose a lock. See "Failures
// of Redis itself" and "What this does not guarantee" below.
//
// # The lease ends while the work goes on: renewal, loss, fencing
//
// The basic pattern leaves one problem open: the lease can run out while
// the holder is still working (a GC pause, a slow disk), and then two clients
// believe they hold the lock. This package answers in three layers.
//
// Renewal. While a Lock is held, a watchdog extends its lease every
// RenewInterval (TTL/3 by default, as Redisson's watchdog renews its 30 s
// lease every 10 s), so work may take longer than the TTL while the TTL
// still bounds how long a crashed holder blocks everyone else.
//
// Loss is reported at once. The Lock knows a deadline until which its lease
// certainly lasts (the send time of the request that took or last extended
// it, plus the lease that request set). When a renewal finds another owner, or the deadline
// passes without a successful renewal, Lost is closed and every context
// from Lock.Context (and Do's) is cancelled with cause ErrLeaseLost.
//
// Fencing. Reporting a loss cannot stop a holder that is paused at the very
// moment, so every acquisition also gets a fencing token (Lock.Token) that
// is larger than every earlier token of the same lock (Martin Kleppmann,
// "How to do distributed locking", 2016). The protected resource remembers
// the largest token it has seen and refuses writes with smaller ones: a
// paused holder that wakes up after someone else acquired is refused. The
// token is issued by the acquire script itself, atomically with the
// acquisition: the server's clock in microseconds, or the last token plus
// one if that is larger. The counter makes tokens strictly increase on one
// server. The clock makes them keep increasing when Redis loses the
// counter's latest value: a restart without persistence loses it, and a
// restart from a snapshot taken before the latest acquisitions, or a
// failover to a replica that had not received them, brings back an older
// value, from which the counter alone would issue again tokens already
// handed out. That rests on one assumption about clocks: the clock of the
// server that issues the first token after such a loss reads later than
// the clock that issued the last token before it did at the time. Clocks
// kept in step by NTP differ by milliseconds, and a restart or failover
// takes longer; a clock stepped back by more than that (by hand, or a
// server whose clock is far behind its master's) breaks it. The same rule
// lets the counter expire: it lives Options.FenceTTL (24 h) after the last
// acquisition, so Redis keeps no key for a name nobody has locked for a
// day, and the next token, the clock, is still larger than the last
// unless the clock stepped back by nearly that long. The seckill service
// in this repository shows the protocol against a SQL database
// (internal/seckill).
//
// # Waiting: queued hand-off instead of polling
//
// The common polling lock retries every 10 ms for up to 1 s; redsync
// retries every 50 to 250 ms. Polling wastes time (a release is noticed late) and is unfair: the
// goroutine that just released is the one most likely to win the next
// round, and under contention others time out. This package waits in two
// queues instead, and hands the lock over in order:
//
//   - In a process, goroutines of one Locker that want the same lock wait
//     in memory, first come first served. Only one request per lock and
//     process contends in Redis.
//   - In Redis, each waiting process has one entry in the lock's queue,
//     under a ticket (a fresh UUID that will be the owner of the
//     acquisition it wins). Release deletes the lock and, in the same
//     script, grants it to the oldest live entry: the lock's value becomes
//     that ticket, a token is issued, and a message on the lock's channel
//     tells the process. Processes are served in turn; the new holder needs
//     no round trip of its own to hold it. The grant's lease is a short
//     claim, as long as the entry's lease (five re-check intervals, or the
//     TTL if that is shorter), which the grantee extends to the full TTL
//     in the background as it takes the grant: a process that crashed
//     while waiting still has an entry
//     for up to that long, and a grant to it then blocks the lock for the
//     claim, not a whole TTL. If no other process is queued, the releaser's
//     own process keeps it, and the reply carries the grant: the lock
//     passes to the next local goroutine in one round trip.
//   - A process passes the lock between its own goroutines without
//     taking it again in Redis, a few times. Each token a release issues
//     (kept or granted) comes with 3 more reserved: the fence counter
//     records the last of them. While a Lock has one left, and at least
//     half a lease, its Release hands the lock to the next local waiter in
//     memory: same owner ticket, the next token, the same lease. The tokens
//     still increase from hold to hold and stay below whoever takes the
//     lock next, even if the process dies mid-run. A process thus holds at
//     most 4 times in a row while another waits, then queues behind it;
//     waiting stays bounded. (Not with DisableRenewal, where each Lock gets
//     a lease of its own, nor with WaitReplicas, where each confirms its
//     own.)
//   - Every hold is checked against Redis after it ends. Redis can lose a
//     held key (a restart without persistence, a failover, an eviction:
//     the key has a TTL, so the volatile-* policies may pick it) and let
//     another process take the lock. A release in Redis finds that out by
//     its compare-and-delete. A hold passed on in memory is checked by the
//     next Lock, which renews its lease at once; the old Lock's Release
//     waits for that answer (one round trip, while the next holder already
//     works). The owner is a fresh UUID, so a key found still the run's
//     was the run's throughout every hold that ended before the check was
//     sent. The guarantee: Release (and Do) returns nil only for a hold
//     that a check found exclusive. A Lock whose hold overlapped another
//     process's hold of the lock gets ErrLeaseLost, with Lost closed,
//     however short the hold; or, if no check could answer (Close, the
//     release's context ended, Redis failed), an error that says so. The
//     Lock that holds the lock when the loss is found has Lost closed at
//     once. It does not cover Redis bringing the key back under the same
//     owner after someone else held it (a failover or a restart to a copy
//     that has it), nor a release whose reply was lost while the key was
//     lost too (see "Round trips and ambiguous outcomes"): the fence does.
//
// Each process shares one Pub/Sub connection for all the locks it waits
// for, and closes it when nobody waits. Messages can be lost (a dropped
// connection), and a holder can crash instead of releasing, so each waiting
// process also re-checks by itself: after the holder's remaining lease if
// that is shorter, otherwise after RecheckInterval (100 ms), jittered. The
// re-check takes over an expired lock and finds a grant whose message was
// lost. It also refreshes the process's place in the queue; a process that
// stops refreshing (it crashed) drops out after five intervals, and one
// whose refresh comes later than that queues again, at the back.
//
// # Round trips and ambiguous outcomes
//
// An uncontended Acquire is one round trip and Release is one. The scripts
// are sent with EVALSHA and fall back to EVAL when the server does not know
// them (redis.Script). Each has a fast path for the uncontended case, which
// runs before the helpers of the queue are even defined: an acquire is
// SET NX PX, EXISTS (queue and tombstone in one), TIME and one SET for the
// token; a release is GET and DEL. While processes are queued, the lock's
// value carries a mark (its owner's ticket followed by " q"), written when
// a process queues and with every grant, so the release learns from its
// GET whether the queue needs serving: with nobody waiting, the release
// does not touch the queue at all, and neither leaves a key behind but the
// fence counter.
//
// A call that fails without a reply from the server (a timeout, a broken
// connection) may still have run, or may still arrive later. Acquire then
// withdraws the ticket: it deletes the lock if the ticket holds it and leaves a
// tombstone that makes a late acquire with that ticket fail, whichever of
// the two reaches Redis first (bsm/redislock leaves such a lock orphaned
// until its TTL), and tries again under a new ticket.
//
// go-redis sends a command again when its reply is lost. The calls that
// must not run twice, an attempt to acquire, a registration in the queue
// and a release, are sent so that go-redis does not (a command whose
// NoRetry is true), and the Locker handles the unknown outcome itself: it
// withdraws the ticket the call carried, and asks a release again in a form
// that is safe to repeat. Since nothing is ever sent twice, a release needs
// no tombstone: if that second call finds the lock gone before the Lock's
// deadline, only the first call can have deleted it. The other calls
// (a refresh of the process's place, extend, withdraw) are safe to run
// twice, and go-redis may retry them.
//
// # Keys
//
// A lock called name uses these keys, all with the hash tag {name} so that
// in Redis Cluster they share a slot and one script can touch them all:
//
//	lock:{name}          the owner's UUID (then " q" while processes are queued), with the lease as its TTL
//	lock:{name}:fence    the last fencing token (expires FenceTTL after it was issued)
//	lock:{name}:queue    ids of waiting processes, oldest first
//	lock:{name}:waiters  each waiting process's ticket, entry expiry and leases
//	lock:{name}:tombstone:ID  a withdrawn ticket (expires with the lease)
//	lock:{name}:grant    the channel grants are published on
//
// # Failures of Redis itself: replica acknowledgement, Redlock
//
// A single Redis deployment can lose a lock: a restart without persistence,
// or a failover to a replica that had not yet received it. Then two clients can hold "the lock" at once. Two options narrow
// that, and one thing makes it harmless:
//
//   - Options.WaitReplicas (Redisson's answer for a master with replicas):
//     every acquisition is confirmed with WAIT on the replicas, or fails
//     with ErrNotReplicated. A failover then finds the lock on the
//     replicas that acknowledged it.
//   - NewRedlock: the lock lives on a quorum of independent masters, so a
//     minority of them can fail or restart empty. See NewRedlock for the
//     algorithm and for what it does not guarantee.
//   - The fencing token, provided the resource checks it. Tokens keep
//     increasing when a restart or failover loses the counter or brings
//     back an older one, as long as the clock of the server that issues
//     the next token is not behind the clock of the one that issued the
//     last by more than the restart or failover took (see Fencing above).
//
// # What this does not guarantee
//
// The deadline a Lock computes assumes that this process's clock and the
// servers' run at about the same rate; it does not assume they agree on the
// time. A process paused longer than its lease learns of the loss only when
// it runs again: the fence, not the lock, stops its late writes. The tokens
// assume only what Fencing above says of the servers' clocks.
//
// The faults that the argument about Redis locks is about can each leave
// two holders at once, and the repository runs each on real processes
// (internal/faulttest, with proxies on the links and a stepped clock on one
// server): a holder cut off from Redis, or slowed on its link to Redis or
// to the database, past its lease, while another replica takes the lock
// over; under Redlock, a node whose clock jumps forward past the TTL, so
// that a second client wins a majority while the first still holds one;
// and a Sentinel split brain, where a master cut off from its sentinels
// goes on granting the lock to the clients on its side of the partition
// while the replica promoted on the other side grants it too. In each, the
// fence refuses the write that comes after the other holder's claim, and
// the same fault with the fence off oversells (docs/checks.md lists them;
// "seckill demo -matrix" shows the cut link and the clock jump).
//
// # References
//
// The Redis documentation of SET (its NX and PX options, and the
// compare-and-delete release script) and its page "Distributed Locks with
// Redis", which describes Redlock; Redisson's RLock (a lease renewed by a
// watchdog, waiters woken by a Pub/Sub unlock message instead of polling)
// and RedissonRedLock; Martin Kleppmann, "How to do distributed locking"
// (2016), on fencing tokens and Redlock's timing assumptions, and
// antirez's reply, "Is Redlock safe?"; and five Chinese blog posts on Redis
// locks, which this package answers point by point: "Redis分布式锁的正确加锁与解锁方式"
// (cnblogs: the four requirements, SETNX then EXPIRE, GETSET timestamps,
// unconditional DEL, GET then DEL, and the lease that ends while the work
// goes on), "Redis分布式锁" (SET NX PX with a Lua release, its three
// problems, Redlock), "Redis分布式锁(一)" (a flash-sale order endpoint
// guarded by a Redis lock, each holder with its own UUID), an article on
// getLock / releaseLock with Jedis and the same wrong examples, and
// "慢谈 Redis 实现分布式锁 以及 Redisson 源码解析" (SET NX PX, Redisson's RLock and
// RedissonRedLock compared).
package lock
