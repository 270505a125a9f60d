// Package faulttest is the fault-injection suite: it runs the real seckill
// binary as separate OS processes against real redis-server processes,
// sells a product with package loadtest, injects a fault in the middle of
// the sale with real signals, and checks afterwards that nothing was
// oversold. The package has no code of its own outside its tests.
//
// TestMain builds the seckill binary once (without -race, so the replicas
// run at normal speed while the test binary itself may run under the race
// detector). Each test starts its own redis-server processes
// (internal/testinfra/redistest) and 2 or 3 `seckill serve` replicas on
// free 127.0.0.1 ports, sharing one database, each with its own log file;
// it waits for /readyz by polling. The database is a SQLite file in the
// test's temp directory or, in the scenarios whose names end in Postgres,
// a database of the test's own (DATABASE=postgres://...) on one PostgreSQL
// server that the suite starts (internal/testinfra/pgtest); there the test
// reads the product through every replica at once before the sale, so
// that their connections to the server are open when it starts. The
// binary and that server are all the tests share, so they run in parallel
// (t.Parallel): most of a scenario is waiting (for a lease to run out, a
// failover, its sale), and they overlap well. Every process is stopped by
// PID when the test ends, pass or fail (SIGCONT first, for one a scenario
// left stopped); the tail of each replica's log is printed when a test
// fails. A missing redis-server or PostgreSQL fails the run with a
// message: a suite that skips itself proves nothing.
//
// A test binary killed before its clean-up (go test's -timeout, a CI
// runner, a second Ctrl-C) takes its processes with it: they are started
// by internal/procutil, whose guard (a parent-death signal on Linux, a
// lifeline watcher on macOS) kills them. TestKilledTestLeavesNoChildren
// kills a child test process with SIGKILL while it buys from its own
// replica and redis-server, and finds both gone; its lifeline variant
// does the same with the lifeline as the only guard, so that macOS's
// mechanism is checked on Linux too; its control, with no guard, finds
// both still running and then kills them.
//
// Faults are timed by what can be observed, never by sleeping: a number of
// orders made (GET /api/v1/products/:id), a replica holding the product's
// lock (its /metrics: acquisitions minus releases), busy answers counted.
// Where a fault must land inside a critical section, that replica gets a
// chaos pause (CHAOS_PAUSE) between its checks and its writes, and the
// test retries the fault, a bounded number of times, until it has evidence
// that it landed there (a fence rejection, or in a control the oversell).
//
// Every scenario checks the load test's safety invariants: stock never
// negative, sold equal to the orders, stock + sold equal to the stock
// there was, every 201 matched by an order (allowing for requests whose
// outcome is unknown, such as those cut by a kill), no user with two
// orders. And each has a negative control: the same scenario with its
// protection switched off must oversell, lose leases, or stall, as listed
// below.
//
// The scenarios, what the lock and the fence do in each, and the negative
// control that shows the scenario would catch the failure it is about:
//
//	Scenario 1: kill -9 a replica while it holds the product's lock
//	  lock:     the lease is neither released nor renewed; it runs out
//	            within LOCK_TTL and a survivor takes the lock over
//	  outcome:  the sale completes on the survivors
//	  control:  LOCK=local (a mutex per process) oversells
//
//	Scenario 2: SIGSTOP a lock holder for longer than the lease, SIGCONT
//	  lock:     the lease runs out; the other replica takes the lock with
//	            a newer fencing token and sells
//	  fence:    refuses the woken holder's write (rejections > 0)
//	  outcome:  nothing oversold
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 3: restart the single Redis (no persistence) while a holder
//	            is inside its critical section
//	  lock:     lock, queues and token counter are forgotten; the next
//	            holder's token comes from the server's clock, still
//	            larger than every earlier one
//	  fence:    refuses the old holder's write
//	  outcome:  nothing oversold, the orders' fences never decrease,
//	            the sale resumes
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 4: Redlock over 3 masters: kill one, then a second, then
//	            restart both
//	  lock:     2 of 3 is a quorum, the sale goes on; with 1 of 3 no lock
//	            is acquired and buyers get 503 busy; the restarted (empty)
//	            nodes rejoin
//	  fence:    tokens keep increasing across the restarts
//	  outcome:  nothing sold without a quorum, nothing oversold, the sale
//	            completes
//	  control:  LOCK=local oversells
//
//	Scenario 5: every critical section lasts 1.5 x the lease (chaos pause)
//	  lock:     renewal every TTL/3 keeps the lease
//	  fence:    has nothing to refuse
//	  outcome:  no lease lost, no fence rejection
//	  control:  LOCK_RENEW=false loses every lease; the fence refuses the
//	            late writes and still keeps the sale exact
//
//	Scenario 6: restart the single Redis from a snapshot taken earlier in
//	            the sale (SAVE, more purchases, restart)
//	  lock:     the fence counter comes back older than the tokens issued
//	            since; the next token is the server's clock, still larger
//	  fence:    accepts the next holder's claim: at most one rejection
//	            per replica after the restart
//	  outcome:  nothing oversold, the orders' fences never decrease,
//	            the sale resumes at once
//	  control:  UNSAFE_COUNTER_TOKENS=true (last token + 1) reissues
//	            tokens the store has seen: the fence refuses every
//	            purchase until the counter catches up, a stall of 503s
//
//	Scenario 7: Redis Sentinel (master, replica, 3 sentinels): stop a
//	            holder, cut replication from master to replica, let the
//	            other replica use the lock, kill -9 the master; once
//	            without and once with LOCK_WAIT_REPLICAS=1
//	  lock:     the replica is promoted (about 2 s) and the clients follow
//	            it. Without WAIT, the locks taken during the cut are
//	            forgotten and the promoted replica's fence counter is
//	            behind; the next token is its clock, still larger. With
//	            WAIT, no lock is taken during the cut, nor before a
//	            replica is back
//	  fence:    refuses the stopped holder's late write; accepts the new
//	            master's claims (at most one rejection)
//	  outcome:  nothing oversold, the orders' fences never decrease, the
//	            sale resumes, in both runs
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 13: a sale of 12 products; SIGSTOP a replica while it pauses
//	            in the critical sections of 3 products or more, until
//	            every lock key held then has expired or changed hands,
//	            SIGCONT
//	  lock:     each of its leases runs out; the other replica takes those
//	            products with newer tokens and sells
//	  fence:    refuses each of the woken replica's writes (rejections
//	            rise by 2 or more)
//	  outcome:  nothing oversold, every product's history linearizable
//	  control:  UNSAFE_NO_FENCE=true oversells
//
// Scenarios 8 to 12 are the network and clock faults. A faultproxy
// (internal/faultproxy) on a link holds its bytes during a partition and
// delivers them when it heals, as TCP does, or delays them; a preloaded
// library (internal/fakeclock) steps one redis-server's wall clock.
//
//	Scenario 8 (a): a's link to Redis partitioned for 2 x the TTL while a
//	            is in its critical section; its database link open
//	  lock:     renewals held, the lease runs out in Redis, b takes the
//	            lock while a still works: two holders
//	  fence:    refuses a's write
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 9 (b): 1.5 x the TTL of latency each way on a's Redis link
//	  lock:     renewals arrive, late, after the lease ran out; b takes over
//	  fence:    refuses a's write
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 10 (e): Redlock on 3 masters, a reaching 2 of them; the
//	            second node's clock jumps 2 x the TTL while a holds it
//	  lock:     a's key there expires at once, b takes a majority of its
//	            own while a still holds one: two majorities
//	  fence:    b's token is larger (that node's clock is ahead); refuses
//	            a's write
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 11 (c): a's PostgreSQL link slowed past its lease
//	            (LOCK_RENEW=false)
//	  lock:     the lease runs out during a's statements; b takes over
//	  fence:    refuses a's late write
//	  control:  UNSAFE_NO_FENCE=true oversells
//
//	Scenario 12 (d): Sentinel split brain: every Redis process behind a
//	            proxy that knows each connection's process; the network
//	            splits into {master, a} and {replica, sentinels, b}, then
//	            heals
//	  lock:     the sentinels promote the replica; b locks on it, a on the
//	            old master, which still takes writes: both masters grant
//	            the lock at once; after the heal the old master becomes the
//	            new one's replica and a follows
//	  fence:    refuses whichever write comes after the other holder's
//	            claim; the orders' fences never decrease
//	  control:  UNSAFE_NO_FENCE=true oversells
//
// Each of 8 to 12 checks that its fault took effect (bytes held or
// delayed, a second holder seen while the first was still inside, the
// first's hold then ending with its lease lost, two majorities, two
// masters granting) and otherwise fails as "fault not injected".
//
// Scenarios 1, 2 (and its control) and 3 also run on PostgreSQL. There a
// holder's claim and write are statements on a server that other replicas
// lock rows on, at READ COMMITTED (package store's doc says why the fence
// stays exact), and the same faults must give the same outcomes: the kill's
// dead connections roll back what they had not committed, the woken
// holder's fenced write matches no row once a newer holder has claimed,
// and without the fence the row locks and transactions do not stop its
// stale write-back from overselling. The kill's sale there has more items
// (200 instead of 100) at the same rate: every statement is a round trip
// to another process, and the survivors could otherwise sell out what was
// left before the kill, leaving no sale to resume.
//
// A scenario's sale lasts as long as its fault's phases, not a time fixed
// in advance: the sale is paced (a steady rate of buyers), and it ends
// (loadtest.Config.End) when the fault has done its last phase, which for
// the scenarios whose sale must complete is its selling out. A slow or
// loaded machine makes the phases, and so the sale, longer; it does not
// end the sale before they are done. The sales whose fault must find
// buyers and stock however long its phases take have more stock than
// they can sell before the deadline (faultTimeout), which only a real
// failure reaches.
//
// The default is the short form that CI runs within `go test -race ./...`:
// sales as long as their faults, at rates of a few dozen requests a
// second. FAULTTEST_LONG=1 makes the sales bigger, and each a soak that
// lasts 15 s at least, its fault's phases done or not.
package faulttest
