package lock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock"
)

// While a goroutine of a process waits for a lock, the process is
// subscribed to the lock's channel, so that a grant reaches it at once
// rather than at the next re-check. A driver (the goroutine that contends
// for the process) ends when its last waiter leaves, and then removes its
// channel from the subscription. If a goroutine of the process still holds
// the lock, the process keeps its state for the lock, and a new waiter can
// start a new driver, which subscribes, before the old one has removed its
// channel. The old driver must remove only what it added: here it is held
// back (a test hook) until the new driver has subscribed. The control
// removes any entry of the same lock, as an ending driver once did: the new
// waiter is left without a subscription.

func TestNewDriverKeepsItsSubscription(t *testing.T) {
	if err := newDriverDuringUnsubscribe(t); err != nil {
		t.Error(err)
	}
}

func TestNewDriverControlOldDriverRemovesItsEntry(t *testing.T) {
	mustCatch(t, lock.UnsubscribeByQueue,
		"an ending driver that removes a newer driver's entry passed the check: the test would not catch it", newDriverDuringUnsubscribe)
}

func newDriverDuringUnsubscribe(t *testing.T) error {
	subscribed := make(chan struct{}, 4)
	unsubscribing := make(chan struct{}, 1)
	proceed := make(chan struct{})
	unsubscribed := make(chan struct{}, 1)
	// Restored after the test's Lockers are closed, and never holds a
	// driver back once the test is over.
	t.Cleanup(lock.OnEvent(func(event, name string) {
		switch event {
		case "subscribed":
			subscribed <- struct{}{}
		case "unsubscribe":
			unsubscribing <- struct{}{}
			<-proceed
		case "unsubscribed":
			unsubscribed <- struct{}{}
		}
	}))
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	p := newLocker(t, srv, lock.Options{RecheckInterval: time.Minute, WaitTimeout: 20 * time.Second})
	var proceedOnce sync.Once
	t.Cleanup(func() { proceedOnce.Do(func() { close(proceed) }) })
	channel := lockKey("res") + ":grant"
	await := func(what string, ch chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}

	held := mustAcquire(t, p, "res")
	defer func() { _ = held.Release(ctx) }()
	// G2 waits; the first driver subscribes. G2 leaves: the driver ends,
	// and is held back just before it unsubscribes.
	ctx2, cancel2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx2, "res")
		done2 <- err
	}()
	await("the first driver to subscribe", subscribed)
	cancel2()
	<-done2
	await("the first driver to end", unsubscribing)
	// G3 waits: a second driver starts and subscribes.
	ctx3, cancel3 := context.WithCancel(ctx)
	defer cancel3()
	done3 := make(chan error, 1)
	go func() {
		lk, err := p.Acquire(ctx3, "res")
		if err == nil {
			err = lk.Release(ctx)
		}
		done3 <- err
	}()
	await("the second driver to subscribe", subscribed)
	proceedOnce.Do(func() { close(proceed) })
	await("the first driver to unsubscribe", unsubscribed)

	// A driver that removed the new driver's entry too closes the
	// subscription's connection, or unsubscribes on it, and Redis counts
	// the change when it has read it: the count is watched for a while
	// rather than read once, so that a slow server does not hide the loss.
	// Kept, the subscription shows 1 all along.
	deadline := time.Now().Add(subscriptionWatch)
	for {
		if n := admin.PubSubNumSub(ctx, channel).Val()[channel]; n != 1 {
			return fmt.Errorf("a goroutine of the process waits for the lock, yet the process has %d subscriptions to its channel, want 1", n)
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// subscriptionWatch is how long newDriverDuringUnsubscribe watches the
// subscription count for the loss of the new driver's entry.
const subscriptionWatch = 2 * time.Second
