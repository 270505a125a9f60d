// Package seckill is the flash-sale domain: products, orders, the rules a
// purchase must obey, the sentinel errors that name each way it can fail,
// and the purchase use case itself (Service, and the designs without a
// lock below). It knows nothing about HTTP, SQL or Redis: it declares the
// small interfaces it consumes, Locker and Store (and ConditionalStore,
// CounterStore, Counter and OrderQueue for the other designs), and the
// packages lock (through an adapter in internal/app), store and
// internal/counter satisfy them.
//
// # The purchase
//
// The usual flash-sale endpoint (see References in package lock) sells an
// item in three steps under a per-product Redis lock: check the stock,
// insert the order, write back the stock read minus one, and unlock in a
// finally block. This package calls that the unfenced sequence.
// Service.Purchase keeps its shape and adds what it leaves open. By
// default (Options.BatchMax above 1) the purchases of a process are served
// together, in rounds across products (batch.go, commit.go); the steps are
// the same for each product of a round:
//
//  1. Validate and look the product up (ErrInvalid, ErrNotFound).
//  2. Fast paths: if the stock just read is zero, answer ErrSoldOut
//     without touching the lock. Most requests of a flash sale arrive after
//     the stock is gone, and they should not queue for a lock only to learn
//     that. The read comes from the shared database, not from a flag in
//     this process's memory, so a restock clears the fast path on every
//     replica at once, by construction: there is no cache to invalidate,
//     hence none is kept. (The buyers of a product who wait for a read
//     share one, which starts after each of them arrived: reads.go.)
//     Likewise a user who already holds a live order (pending or paid)
//     gets ErrAlreadyPurchased here, as the database had it after the
//     request arrived, and repeat clicks neither queue for the lock nor
//     move the fence. A buyer that passes these checks with stale data is
//     caught by step 5, which checks again under the lock.
//  3. Queue behind the product's other buyers in this process; the oldest
//     leads the product into the next round. The round takes the lock of
//     every product it serves in one round trip, waiting for none
//     (Locker.TryAcquireAll); a product whose lock another process holds
//     waits for it in the lock's own queue (Locker.Acquire) and joins the
//     round after, holding it. A purchase that gets no turn within
//     Options.Wait gives ErrBusy.
//  4. Claim each product's fence: store its lock's fencing token on the
//     product, only if it is larger than the one stored. If it is not, a
//     newer holder exists, and that product's batch stops
//     (ErrFenceRejected).
//  5. Read each product again, after every claim, with its buyers' earlier
//     orders, and decide each purchase by the rules, in arrival order: one
//     order per user per product (ErrAlreadyPurchased), stock left
//     (ErrSoldOut). Steps 4 and 5 are one call for the whole round,
//     Store.ClaimAndReadAll, whose reads run after its claims.
//  6. In one transaction, write each product's stock read in step 5 minus
//     its orders, and insert its orders, each product only if its fence
//     still holds its holder's token (Store.PlaceOrdersAll); a product
//     whose fence moved on writes nothing (ErrFenceRejected), and the
//     others are written. A product whose orders another writer of the
//     database made a duplicate of since the read writes nothing either,
//     and a failed call writes nothing at all: those buyers get ErrBusy,
//     a retryable answer, never a rule's.
//  7. Answer each buyer, and release every lock of the round in one round
//     trip (Locker.ReleaseAll), whatever happened (a defer: the finally
//     block).
//
// With Options.BatchMax of 0 or 1, a purchase runs the same steps alone:
// Locker.Acquire in step 3, Store.ClaimAndRead for steps 4 and 5, and
// Store.PlaceOrders for step 6.
//
// # Why the fence, and not the lease, keeps the sale exact
//
// The unfenced sequence's open problem is a holder whose lease runs out
// while it is still working: a GC pause, a stalled disk or a slow network,
// longer than the TTL. Redis then gives the lock to the next buyer, and two processes
// are in the critical section at once. Renewal makes that rarer but cannot
// rule it out (a paused process cannot renew, and cannot notice that it
// failed to), and checking the lock's Lost channel before writing only
// narrows the window: the lease can run out between the check and the
// write.
//
// Steps 4 to 6 close it where the data lives, product by product. Tokens
// grow with every acquisition of a lock, so a holder that claims the fence
// in step 4 has a token larger than every earlier holder's. From then on,
// an earlier holder's conditional write in step 6 matches no row and is
// refused, so at most one holder, the latest, can write. And the latest holder reads in
// step 5 only after its claim: every write accepted before the claim is
// already in what it reads, and no write of an earlier holder can be
// accepted after it. The stock it writes back is therefore never based on a
// stale read, whatever the lease did. The unfenced write-back of "the value
// read minus one" is exactly what a stale read turns into an oversell; the
// fence is what makes that write-back safe, which is why the SQL guards the
// stock write with the fence alone and not with "stock > 0": disabling the
// fence must show the oversell, not hide it.
//
// This is the fencing-token scheme of Kleppmann's "How to do distributed
// locking": the lock decides who may try, the resource decides whose write
// counts.
//
// # Reservations
//
// With Options.PayWindow set, the order a purchase makes is pending: the
// buyer pays (Pay) or cancels (Cancel) within the window, or every
// replica's expiry (ExpireDue, RunExpiry) puts the unit back on sale once
// the window has passed. Each order moves out of pending once, by a
// conditional update of its row in the transaction that moves its unit. A
// cancel and an expiry add to the stock, so they run under the product's
// lock and write only under its fence, as a purchase does; a payment moves
// a unit from reserved to sold, which no purchase writes back, and takes
// no lock (life.go, pays.go; docs/reservations.md).
//
// # Unfenced modes
//
// With Options.Unfenced set, Purchase runs the unfenced sequence as written:
// read the stock, check it, insert the order, then write back the value
// read minus one in a separate statement, with no fence and no
// transaction. Under a lock that is truly exclusive this is correct; the
// lock modes none (no lock) and local (an in-process mutex, exclusive only
// within one replica) exist to show that it oversells when it is not, and
// the unsafe no-fence switch shows the same for a Redis lock whose lease
// ran out. Those two writes are UnfencedStore's, a separate interface that
// only an unfenced Service holds, so the fenced path has no way to call
// them.
//
// # Designs without a lock
//
// Service is the locked design. Three more types sell through the same API,
// with the same answers, each its own small implementation of Purchase, so
// that each reads end to end (docs/designs.md compares them):
//
//   - Conditional (conditional.go): one transaction, a conditional UPDATE
//     ... WHERE stock > 0 then the order's insert. The database's row lock
//     serialises the buyers.
//   - CounterSale (counter_sale.go): a Lua script in Redis checks the
//     buyer set and a stock counter and takes one, then the order is
//     inserted before the answer; a failed insert is undone.
//   - AsyncCounterSale (counter_async.go): the same script also queues the
//     order in Redis, the buyer gets the 201 at once, and an OrderWriter
//     (writer.go) in every replica writes the queue to the database.
//
// What the counter designs share, and where their counter comes from, is
// in counter.go. None of them has a fence: a decision taken in Redis and
// written to the database later cannot be refused by the database when
// Redis has since forgotten it, which is what the fence does for the lock.
//
// With a payment window, Conditional has the same life as Service with no
// lock (its writes to the stock are relative, under the row's lock);
// CounterSale has it too, each move made in the database first and then
// told to the counter, and loses the unit of a cancel or an expiry when it
// dies between the two; AsyncCounterSale refuses a window, its 201 coming
// before the order exists (docs/designs.md, "With a payment window").
package seckill
