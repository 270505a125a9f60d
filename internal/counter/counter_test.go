package counter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/counter"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
)

func newCounter(t *testing.T) (*counter.Counter, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return counter.New(srv.Client(), "test"), srv
}

func counts(t *testing.T, c *counter.Counter, id int64) *seckill.Count {
	t.Helper()
	got, err := c.Counts(context.Background(), []int64{id})
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// Each script does what its file says, step by step on one product.
func TestScripts(t *testing.T) {
	c, _ := newCounter(t)
	ctx := context.Background()
	const id = 7

	if _, err := c.Take(ctx, id, "alice"); !errors.Is(err, seckill.ErrNoCounter) {
		t.Fatalf("Take without a counter: got %v, want ErrNoCounter", err)
	}
	if _, err := c.Restock(ctx, id, 5); !errors.Is(err, seckill.ErrNoCounter) {
		t.Fatalf("Restock without a counter: got %v, want ErrNoCounter", err)
	}
	if got := counts(t, c, id); got != nil {
		t.Fatalf("Counts without a counter: got %+v, want nil", got)
	}
	built, ok, err := c.Build(ctx, id, seckill.Count{Stock: 2, Sold: 3, Gen: 4})
	if err != nil || !ok || built != (seckill.Count{Stock: 2, Sold: 3, Gen: 4}) {
		t.Fatalf("Build: got %+v, %v, %v; want the counter given, built", built, ok, err)
	}
	// A second build finds the first one's counter and leaves it.
	if got, ok, err := c.Build(ctx, id, seckill.Count{Stock: 9}); err != nil || ok || got != built {
		t.Fatalf("second Build: got %+v, %v, %v; want %+v, not built", got, ok, err, built)
	}

	aliceTicket, err := c.Take(ctx, id, "alice")
	if err != nil || aliceTicket == "" {
		t.Fatalf("Take: got ticket %q, %v; want a ticket", aliceTicket, err)
	}
	if _, err := c.Take(ctx, id, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Errorf("alice again: got %v, want ErrAlreadyPurchased", err)
	}
	bobTicket, err := c.Take(ctx, id, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(ctx, id, "carol"); !errors.Is(err, seckill.ErrSoldOut) {
		t.Errorf("carol: got %v, want ErrSoldOut", err)
	}
	if _, err := c.Take(ctx, id, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Errorf("alice once sold out: got %v, want ErrAlreadyPurchased (the buyer is checked first)", err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 0, Sold: 5, Gen: 4}) {
		t.Errorf("after two takes: got %+v, want stock 0, sold 5, gen 4", got)
	}

	// Undo of bob's take, same generation: the item comes back.
	if err := c.Undo(ctx, id, "bob", bobTicket); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 1, Sold: 4, Gen: 4}) {
		t.Errorf("after the undo: got %+v, want stock 1, sold 4", got)
	}
	// Undoing again finds bob gone from the buyers: nothing to give back.
	if err := c.Undo(ctx, id, "bob", bobTicket); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 1, Sold: 4, Gen: 4}) {
		t.Errorf("after the second undo: got %+v, want it unchanged", got)
	}

	// A restock sets the stock, keeps sold, and moves the generation on.
	rc, err := c.Restock(ctx, id, 10)
	if err != nil || rc != (seckill.Count{Stock: 10, Sold: 4, Gen: 5}) {
		t.Fatalf("Restock: got %+v, %v; want stock 10, sold 4, gen 5", rc, err)
	}
	// Undoing alice's take of generation 4 after it: she leaves, sold goes
	// down, and the restock's stock stays what it set.
	if err := c.Undo(ctx, id, "alice", aliceTicket); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 10, Sold: 3, Gen: 5}) {
		t.Errorf("after undoing a take from before the restock: got %+v, want stock 10, sold 3", got)
	}
	if _, err := c.Take(ctx, id, "alice"); err != nil {
		t.Errorf("alice after her take was undone: got %v, want a sale", err)
	}
}

// The scripts of a reservation's life, on one product: a reserve counts
// the item reserved; a payment moves it to sold and a give-back to the
// stock, letting its user buy again, each only into the counter whose
// epoch was read before the database's move; an undo of a reserve gives
// back a reserved item; a restock keeps the reserved count.
func TestLifeScripts(t *testing.T) {
	c, srv := newCounter(t)
	ctx := context.Background()
	const id = 9
	if epochs, err := c.Epochs(ctx, []int64{id}); err != nil || len(epochs) != 1 || epochs[0] != "" {
		t.Fatalf("Epochs without a counter: got %q, %v; want one empty", epochs, err)
	}
	if _, _, err := c.Build(ctx, id, seckill.Count{Stock: 4, Reserved: 1, Sold: 1}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, err := c.Reserve(ctx, id, u); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reserve(ctx, id, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Errorf("alice again: got %v, want ErrAlreadyPurchased", err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 1, Reserved: 4, Sold: 1}) {
		t.Fatalf("after three reserves: got %+v, want stock 1, reserved 4, sold 1", got)
	}
	epochs, err := c.Epochs(ctx, []int64{id, id + 1})
	if err != nil || len(epochs) != 2 || epochs[0] == "" || epochs[1] != "" {
		t.Fatalf("Epochs: got %q, %v; want the counter's, then none", epochs, err)
	}
	epoch := epochs[0]
	if moved, err := c.Pay(ctx, id, epoch, 2); err != nil || !moved {
		t.Fatalf("Pay: got %v, %v; want moved", moved, err)
	}
	if given, err := c.GiveBack(ctx, id, epoch, []string{"carol"}); err != nil || !given {
		t.Fatalf("GiveBack: got %v, %v; want given", given, err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 2, Reserved: 1, Sold: 3}) {
		t.Errorf("after paying two and giving one back: got %+v, want stock 2, reserved 1, sold 3", got)
	}
	if _, err := c.Reserve(ctx, id, "carol"); err != nil {
		t.Errorf("carol after her unit came back: got %v, want a reserve", err)
	}
	// A restock sets the stock; the reserved count stays, and a unit
	// given back after it is added to the stock it set.
	if rc, err := c.Restock(ctx, id, 5); err != nil || rc != (seckill.Count{Stock: 5, Reserved: 2, Sold: 3, Gen: 1}) {
		t.Fatalf("Restock: got %+v, %v; want stock 5, reserved 2, sold 3, gen 1", rc, err)
	}
	if _, err := c.GiveBack(ctx, id, epoch, []string{"carol"}); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 6, Reserved: 1, Sold: 3, Gen: 1}) {
		t.Errorf("a give-back after the restock: got %+v, want stock 6, reserved 1", got)
	}
	// The undo of a reserve takes it from reserved.
	dave, err := c.Reserve(ctx, id, "dave")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Undo(ctx, id, "dave", dave); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 6, Reserved: 1, Sold: 3, Gen: 1}) {
		t.Errorf("after undoing dave's reserve: got %+v, want it as before", got)
	}
	// A counter built again since the epoch's read is left alone: it was
	// built from a database that had the moves already.
	srv.Restart()
	if _, _, err := c.Build(ctx, id, seckill.Count{Stock: 6, Reserved: 1, Sold: 3}); err != nil {
		t.Fatal(err)
	}
	if moved, err := c.Pay(ctx, id, epoch, 1); err != nil || moved {
		t.Errorf("Pay with the lost counter's epoch: got %v, %v; want nothing moved", moved, err)
	}
	if given, err := c.GiveBack(ctx, id, epoch, []string{"bob"}); err != nil || given {
		t.Errorf("GiveBack with the lost counter's epoch: got %v, %v; want nothing given", given, err)
	}
	if given, err := c.GiveBack(ctx, id+1, "", []string{"bob"}); err != nil || given {
		t.Errorf("GiveBack to no counter: got %v, %v; want nothing given", given, err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 6, Reserved: 1, Sold: 3}) {
		t.Errorf("after the stale moves: got %+v, want the counter as built", got)
	}
	if got := counts(t, c, id+1); got != nil {
		t.Errorf("a give-back to no counter made one: %+v", got)
	}
}

// A take from a counter that was lost is not undone in the counter built
// after it, even when the same user bought from the new one: the new one
// was built from the orders, which never had the old take, and her new
// purchase must stay counted.
func TestUndoAfterARebuildDoesNothing(t *testing.T) {
	c, srv := newCounter(t)
	ctx := context.Background()
	const id = 8
	if _, _, err := c.Build(ctx, id, seckill.Count{Stock: 5}); err != nil {
		t.Fatal(err)
	}
	old, err := c.Take(ctx, id, "alice")
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart() // no persistence: the counter and its buyers are gone
	if _, _, err := c.Build(ctx, id, seckill.Count{Stock: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := c.Undo(ctx, id, "alice", old); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, c, id); *got != (seckill.Count{Stock: 4, Sold: 1}) {
		t.Errorf("after undoing the lost counter's take: got %+v, want stock 4, sold 1 (alice's new take)", got)
	}
	if _, err := c.Take(ctx, id, "alice"); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Errorf("alice again: got %v, want ErrAlreadyPurchased (still a buyer of the new counter)", err)
	}
}

// The take is atomic: buyers racing on several connections take exactly
// the stock, and each at most once.
func TestTakeIsAtomic(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const id, stock, buyers = 1, 50, 400
	if _, _, err := counter.New(srv.Client(), "db").Build(ctx, id, seckill.Count{Stock: stock}); err != nil {
		t.Fatal(err)
	}
	cs := []*counter.Counter{counter.New(srv.Client(), "db"), counter.New(srv.Client(), "db")}
	var taken, twice sync.Map
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			// Every buyer twice, on both clients at once.
			user := fmt.Sprintf("u%d", i%(buyers/2))
			_, err := cs[i%2].Take(ctx, id, user)
			if err == nil {
				if _, dup := taken.LoadOrStore(user, true); dup {
					twice.Store(user, true)
				}
			}
		})
	}
	wg.Wait()
	n := 0
	taken.Range(func(any, any) bool { n++; return true })
	twice.Range(func(k, _ any) bool { t.Errorf("user %v took two items", k); return true })
	if got := counts(t, cs[0], id); n != stock || *got != (seckill.Count{Stock: 0, Sold: stock}) {
		t.Errorf("got %d buyers, counter %+v; want %d and stock 0, sold %d", n, got, stock, stock)
	}
}

// Two databases on one Redis have counters of their own.
func TestDatabasesDoNotShareCounters(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a, b := counter.New(srv.Client(), "a"), counter.New(srv.Client(), "b")
	if _, _, err := a.Build(ctx, 1, seckill.Count{Stock: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take(ctx, 1, "alice"); !errors.Is(err, seckill.ErrNoCounter) {
		t.Errorf("database b's take of product 1: got %v, want ErrNoCounter", err)
	}
}

// The queue: a take appends its order in the same script; a read gives
// each order to one consumer; an order given and never acknowledged is
// claimed after its idle time; acknowledged orders leave the stream.
func TestOrderQueue(t *testing.T) {
	c, srv := newCounter(t)
	ctx := context.Background()
	const id = 3
	if _, _, err := c.Build(ctx, id, seckill.Count{Stock: 3}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, u := range []string{"alice", "bob", "alice"} {
		err := c.TakeQueued(ctx, &seckill.Order{ProductID: id, UserID: u, CreatedAt: at})
		if u == "alice" && err != nil && !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatal(err)
		}
	}
	if n, err := c.QueueLength(ctx); err != nil || n != 2 {
		t.Fatalf("queue length: got %d, %v; want 2 (the refused take queues nothing)", n, err)
	}
	// The group is created on first read, from the start of the stream.
	first, err := c.Read(ctx, "w1", 1, 0)
	if err != nil || len(first) != 1 {
		t.Fatalf("w1's read: got %v, %v; want 1 order", first, err)
	}
	if o := first[0].Order; o.ProductID != id || o.UserID != "alice" || !o.CreatedAt.Equal(at) {
		t.Errorf("queued order: got %+v, want alice's for product %d at %v", o, id, at)
	}
	second, err := c.Read(ctx, "w2", 10, 0)
	if err != nil || len(second) != 1 || second[0].Order.UserID != "bob" {
		t.Fatalf("w2's read: got %v, %v; want bob's order only", second, err)
	}
	if more, err := c.Read(ctx, "w2", 10, 0); err != nil || len(more) != 0 {
		t.Errorf("a third read: got %v, %v; want nothing", more, err)
	}
	if err := c.Ack(ctx, []string{second[0].ID}); err != nil {
		t.Fatal(err)
	}
	// w1 never acknowledges alice's order: w2 claims it once it has been
	// idle long enough, and not before.
	if got, err := c.Claim(ctx, "w2", time.Hour, 10); err != nil || len(got) != 0 {
		t.Errorf("claim with an hour's idle time: got %v, %v; want nothing", got, err)
	}
	// Redis counts idle time in milliseconds: the claim of an order idle
	// 1 ms or more succeeds once that much has passed.
	var claimed []seckill.QueuedOrder
	poll.Eventually(t, 10*time.Second, "the claim of w1's order", func() bool {
		claimed, err = c.Claim(ctx, "w2", time.Millisecond, 10)
		return err != nil || len(claimed) > 0
	})
	if err != nil || len(claimed) != 1 || claimed[0].ID != first[0].ID {
		t.Fatalf("claim: got %v, %v; want alice's order %s", claimed, err, first[0].ID)
	}
	if err := c.Ack(ctx, []string{claimed[0].ID}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.QueueLength(ctx); err != nil || n != 0 {
		t.Errorf("queue length after the acknowledgements: got %d, %v; want 0", n, err)
	}

	// A Redis that lost everything: the next take creates the stream
	// without the group, and the next read creates the group from the
	// stream's start, so that order is read.
	if err := srv.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Build(ctx, id, seckill.Count{Stock: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.TakeQueued(ctx, &seckill.Order{ProductID: id, UserID: "carol", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Read(ctx, "w3", 10, 0)
	if err != nil || len(got) != 1 || got[0].Order.UserID != "carol" {
		t.Errorf("read after the loss: got %v, %v; want carol's order", got, err)
	}
}

// A blocking read returns as soon as an order is queued, and an empty one
// after its wait.
func TestReadBlocks(t *testing.T) {
	c, _ := newCounter(t)
	ctx := context.Background()
	if _, _, err := c.Build(ctx, 1, seckill.Count{Stock: 1}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Read(ctx, "w", 10, 10*time.Millisecond); err != nil || len(got) != 0 {
		t.Fatalf("read of an empty queue: got %v, %v; want nothing", got, err)
	}
	read := make(chan []seckill.QueuedOrder, 1)
	go func() {
		got, err := c.Read(ctx, "w", 10, time.Minute)
		if err != nil {
			t.Error(err)
		}
		read <- got
	}()
	if err := c.TakeQueued(ctx, &seckill.Order{ProductID: 1, UserID: "alice", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := <-read; len(got) != 1 {
		t.Errorf("blocked read: got %v, want alice's order", got)
	}
}
