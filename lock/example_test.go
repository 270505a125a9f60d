package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock"
)

// Acquire and Release by hand: defer the Release right away, so that it
// runs whatever happens (the finally of a try / finally), and look at its
// error: ErrLeaseLost means the critical section may not have been
// exclusive.
func ExampleLocker_Acquire() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lock.New(client, lock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lk, err := locker.Acquire(ctx, "product:42")
	if err != nil {
		log.Fatal(err) // matches lock.ErrNotAcquired, and ctx's error if ctx ended
	}
	defer func() {
		if err := lk.Release(ctx); err != nil {
			log.Print(err) // lock.ErrLeaseLost: another holder may have overlapped
			return
		}
		fmt.Println("released")
	}()

	fmt.Println("holding", lk.Name())
	// Output:
	// holding product:42
	// released
}

// Do is the whole pattern: acquire, run, release in a defer, and stop
// writing if the lease is lost (fn's context is cancelled then). Do
// returns fn's error joined with the release's.
func ExampleLocker_Do() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lock.New(client, lock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	stock := 3
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.Do(context.Background(), "product:7", func(ctx context.Context, lk *lock.Lock) error {
				if stock == 0 {
					return errSoldOut
				}
				stock-- // read, check and write, with no other buyer in between
				return nil
			})
			if err != nil && !errors.Is(err, errSoldOut) {
				log.Print(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("stock left:", stock)
	// Output:
	// stock left: 0
}

var errSoldOut = errors.New("sold out")

// fencedStock is a resource that checks fencing tokens: it remembers the
// largest token that wrote, and refuses a write with an older one.
type fencedStock struct {
	mu    sync.Mutex
	fence int64
	stock int
}

func (s *fencedStock) write(token int64, stock int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fence {
		return fmt.Errorf("token %d is older than %d", token, s.fence)
	}
	s.fence, s.stock = token, stock
	return nil
}

// The token is what keeps a holder whose lease ran out from writing: here
// the first holder stalls past its lease (renewal is off), a second one
// takes the lock and writes, and the first one's late write is refused by
// the resource, which has seen a newer token.
func ExampleLock_Token() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	// A short lease, and no renewal: the stall below outlasts it.
	locker, err := lock.New(client, lock.Options{TTL: 100 * time.Millisecond, DisableRenewal: true})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	res := &fencedStock{stock: 10}

	first, err := locker.Acquire(ctx, "product:9")
	if err != nil {
		log.Fatal(err)
	}
	<-first.Lost() // it stalled past its lease

	second, err := locker.Acquire(ctx, "product:9")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second holder:", res.write(second.Token(), 9))
	fmt.Println("first holder, late:", res.write(first.Token(), 9) != nil)
	_ = second.Release(ctx)
	fmt.Println("first holder's release:", errors.Is(first.Release(ctx), lock.ErrLeaseLost))
	// Output:
	// second holder: <nil>
	// first holder, late: true
	// first holder's release: true
}
