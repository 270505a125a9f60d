package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock"
)

// Do is the whole pattern: acquire, run, release in a defer, and stop
// writing if the lease is lost.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := lock.New(client, lock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(context.Background(), "product:42", func(ctx context.Context, lk *lock.Lock) error {
		// Exclusive while the lease holds. ctx is cancelled if it is lost,
		// and the resource should refuse writes carrying a token older
		// than one it has seen.
		return writeStock(ctx, lk.Token())
	})
	if errors.Is(err, lock.ErrNotAcquired) {
		fmt.Println("busy, try again")
	}
}

// Acquire and Release by hand: defer the Release right away, so that it
// runs whatever happens (the finally of a try / finally).
func ExampleLocker_Acquire() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := lock.New(client, lock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lk, err := locker.Acquire(ctx, "product:42")
	if err != nil {
		log.Print(err) // matches lock.ErrNotAcquired, and ctx's error if ctx ended
		return
	}
	defer func() {
		if err := lk.Release(ctx); err != nil {
			log.Print(err) // lock.ErrNotHeld, or lock.ErrLeaseLost
		}
	}()
	select {
	case <-lk.Lost():
		return // someone else may hold it now
	default:
	}
	_ = writeStock(ctx, lk.Token())
}

// writeStock stands for the protected write: an UPDATE ... WHERE fence <=
// token, for example.
func writeStock(context.Context, int64) error { return nil }
