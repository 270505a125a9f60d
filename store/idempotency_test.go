package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// limit is the in-flight limit of these tests: a claim older than this is
// stale.
const limit = time.Minute

// claimAt is a claim of key for user with fingerprint fp, made at at.
func claimAt(user, key, fp string, at time.Time) seckill.KeyClaim {
	return seckill.KeyClaim{RequestKey: seckill.RequestKey{UserID: user, Key: key}, Fingerprint: fp, At: at, StaleBefore: at.Add(-limit)}
}

func claim(t *testing.T, s *store.Store, c seckill.KeyClaim, want seckill.KeyState) seckill.KeyRecord {
	t.Helper()
	rec, err := s.ClaimKey(context.Background(), c)
	if err != nil {
		t.Fatalf("ClaimKey(%+v): %v", c, err)
	}
	if rec.State != want {
		t.Fatalf("ClaimKey(%s %s %s at %v): got %v, want %v", c.UserID, c.Key, c.Fingerprint, c.At, rec.State, want)
	}
	if claimed := want == seckill.KeyClaimed || want == seckill.KeyTakenOver; claimed != (rec.Attempt != "") {
		t.Errorf("attempt: got %q with %v", rec.Attempt, rec.State)
	}
	return rec
}

func sameReply(t *testing.T, got, want seckill.Reply) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || !maps.Equal(got.Header, want.Header) {
		t.Errorf("reply: got %d %v %q, want %d %v %q", got.Status, got.Header, got.Body, want.Status, want.Header, want.Body)
	}
}

// A key's life: claimed by its first attempt, in flight to a retry, reused
// by another request, answered, and then replayed to every retry; another
// user's equal key is another key.
func TestClaimKey(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		t0 := time.Now().Truncate(time.Millisecond)
		k := seckill.RequestKey{UserID: "alice", Key: "k1"}

		first := claim(t, s, claimAt("alice", "k1", "fp-a", t0), seckill.KeyClaimed)
		claim(t, s, claimAt("alice", "k1", "fp-a", t0.Add(limit/2)), seckill.KeyInFlight)
		claim(t, s, claimAt("alice", "k1", "fp-b", t0.Add(limit/2)), seckill.KeyReused)
		claim(t, s, claimAt("bob", "k1", "fp-b", t0), seckill.KeyClaimed)

		reply := seckill.Reply{Status: 201, Header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, Body: []byte(`{"order":{"id":7}}`)}
		if err := s.CompleteKey(ctx, k, first.Attempt, reply); err != nil {
			t.Fatalf("CompleteKey: %v", err)
		}
		// Long after, still the same answer: a replay is not a claim, and
		// never stale.
		rec := claim(t, s, claimAt("alice", "k1", "fp-a", t0.Add(10*limit)), seckill.KeyReplay)
		sameReply(t, rec.Reply, reply)
		claim(t, s, claimAt("alice", "k1", "fp-b", t0.Add(10*limit)), seckill.KeyReused)

		// An answer is recorded once.
		if err := s.CompleteKey(ctx, k, first.Attempt, seckill.Reply{Status: 500}); !errors.Is(err, seckill.ErrKeyLost) {
			t.Errorf("CompleteKey again: got %v, want ErrKeyLost", err)
		}
		if err := s.ReleaseKey(ctx, k, first.Attempt); !errors.Is(err, seckill.ErrKeyLost) {
			t.Errorf("ReleaseKey once answered: got %v, want ErrKeyLost", err)
		}
		sameReply(t, claim(t, s, claimAt("alice", "k1", "fp-a", t0), seckill.KeyReplay).Reply, reply)

		// An empty answer and no headers come back as such.
		k2 := seckill.RequestKey{UserID: "alice", Key: "k2"}
		second := claim(t, s, claimAt("alice", "k2", "fp-a", t0), seckill.KeyClaimed)
		if err := s.CompleteKey(ctx, k2, second.Attempt, seckill.Reply{Status: 204}); err != nil {
			t.Fatal(err)
		}
		sameReply(t, claim(t, s, claimAt("alice", "k2", "fp-a", t0), seckill.KeyReplay).Reply, seckill.Reply{Status: 204, Body: []byte{}})
	})
}

// A released key is new again; an attempt that no longer holds its key can
// neither release it nor answer for it.
func TestReleaseKey(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		t0 := time.Now().Truncate(time.Millisecond)
		k := seckill.RequestKey{UserID: "alice", Key: "busy"}
		first := claim(t, s, claimAt("alice", "busy", "fp", t0), seckill.KeyClaimed)
		if err := s.ReleaseKey(ctx, k, "another attempt"); !errors.Is(err, seckill.ErrKeyLost) {
			t.Errorf("ReleaseKey by another attempt: got %v, want ErrKeyLost", err)
		}
		claim(t, s, claimAt("alice", "busy", "fp", t0), seckill.KeyInFlight)
		if err := s.ReleaseKey(ctx, k, first.Attempt); err != nil {
			t.Fatalf("ReleaseKey: %v", err)
		}
		// Released, the key takes any request, as a new key does.
		second := claim(t, s, claimAt("alice", "busy", "fp-other", t0), seckill.KeyClaimed)
		if second.Attempt == first.Attempt {
			t.Errorf("a new claim got the released attempt %q", first.Attempt)
		}
		if err := s.CompleteKey(ctx, k, first.Attempt, seckill.Reply{Status: 201}); !errors.Is(err, seckill.ErrKeyLost) {
			t.Errorf("CompleteKey by the released attempt: got %v, want ErrKeyLost", err)
		}
	})
}

// An attempt in flight for longer than the limit is taken over by a retry
// of the same request: the retry holds the key, and the first attempt, if
// it was only slow, can no longer answer for it or release it. Up to the
// limit, the first attempt keeps it.
func TestTakeOverStaleKey(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		t0 := time.Now().Truncate(time.Millisecond)
		k := seckill.RequestKey{UserID: "alice", Key: "k"}
		first := claim(t, s, claimAt("alice", "k", "fp", t0), seckill.KeyClaimed)

		claim(t, s, claimAt("alice", "k", "fp", t0.Add(limit)), seckill.KeyInFlight) // claimed exactly at StaleBefore
		claim(t, s, claimAt("alice", "k", "fp-other", t0.Add(2*limit)), seckill.KeyReused)
		retry := claim(t, s, claimAt("alice", "k", "fp", t0.Add(limit+time.Millisecond)), seckill.KeyTakenOver)
		if retry.Attempt == first.Attempt {
			t.Fatalf("the takeover kept the first attempt %q", first.Attempt)
		}
		// The takeover is a claim: the limit starts again from it.
		claim(t, s, claimAt("alice", "k", "fp", t0.Add(2*limit)), seckill.KeyInFlight)

		late := seckill.Reply{Status: 201, Body: []byte("first")}
		if err := s.CompleteKey(ctx, k, first.Attempt, late); !errors.Is(err, seckill.ErrKeyLost) {
			t.Errorf("CompleteKey by the first attempt: got %v, want ErrKeyLost", err)
		}
		if err := s.ReleaseKey(ctx, k, first.Attempt); !errors.Is(err, seckill.ErrKeyLost) {
			t.Errorf("ReleaseKey by the first attempt: got %v, want ErrKeyLost", err)
		}
		truth := seckill.Reply{Status: 409, Body: []byte("retry")}
		if err := s.CompleteKey(ctx, k, retry.Attempt, truth); err != nil {
			t.Fatalf("CompleteKey by the retry: %v", err)
		}
		sameReply(t, claim(t, s, claimAt("alice", "k", "fp", t0.Add(3*limit)), seckill.KeyReplay).Reply, truth)
	})
}

// First attempts of one request that claim its key at once, from several
// replicas (store handles), get it once: the others find it in flight.
// Stale retries that take it over at once take it over once.
func TestConcurrentClaimsOfOneKey(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		const n = 8
		stores := make([]*store.Store, 4)
		for i := range stores {
			stores[i] = open(t, db)
		}
		t0 := time.Now().Truncate(time.Millisecond)
		race := func(at time.Time) map[seckill.KeyState]int {
			var (
				mu     sync.Mutex
				counts = map[seckill.KeyState]int{}
				errs   []error
				wg     sync.WaitGroup
				start  = make(chan struct{})
			)
			for i := range n {
				wg.Go(func() {
					<-start
					rec, err := stores[i%len(stores)].ClaimKey(context.Background(), claimAt("alice", "k", "fp", at))
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					counts[rec.State]++
				})
			}
			close(start)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("ClaimKey: %v", errs)
			}
			return counts
		}
		if got, want := race(t0), (map[seckill.KeyState]int{seckill.KeyClaimed: 1, seckill.KeyInFlight: n - 1}); !maps.Equal(got, want) {
			t.Errorf("first attempts: got %v, want %v", got, want)
		}
		if got, want := race(t0.Add(2*limit)), (map[seckill.KeyState]int{seckill.KeyTakenOver: 1, seckill.KeyInFlight: n - 1}); !maps.Equal(got, want) {
			t.Errorf("stale retries: got %v, want %v", got, want)
		}
	})
}

// ExpireKeys deletes the keys first claimed before the cut, but not one
// whose attempt may still be running, and at most limit at a time.
func TestExpireKeys(t *testing.T) {
	pgtest.EachDB(t, func(t *testing.T, db string) {
		s := open(t, db)
		ctx := context.Background()
		t0 := time.Now().Truncate(time.Millisecond)
		done := func(key string, at time.Time) {
			t.Helper()
			rec := claim(t, s, claimAt("alice", key, "fp", at), seckill.KeyClaimed)
			if err := s.CompleteKey(ctx, seckill.RequestKey{UserID: "alice", Key: key}, rec.Attempt, seckill.Reply{Status: 201}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			done(fmt.Sprint("old-", i), t0)
		}
		done("new", t0.Add(time.Hour))
		claim(t, s, claimAt("alice", "old-stale", "fp", t0), seckill.KeyClaimed)
		claim(t, s, claimAt("alice", "old-running", "fp", t0), seckill.KeyClaimed)
		claim(t, s, claimAt("alice", "old-running", "fp", t0.Add(time.Hour)), seckill.KeyTakenOver)

		cut, stale := t0.Add(time.Minute), t0.Add(time.Minute)
		if n, err := s.ExpireKeys(ctx, cut, stale, 2); err != nil || n != 2 {
			t.Fatalf("ExpireKeys, limit 2: got %d, %v; want 2", n, err)
		}
		if n, err := s.ExpireKeys(ctx, cut, stale, 100); err != nil || n != 2 {
			t.Fatalf("ExpireKeys: got %d, %v; want the 2 left of old-0..2 and old-stale", n, err)
		}
		if n, err := s.ExpireKeys(ctx, cut, stale, 100); err != nil || n != 0 {
			t.Fatalf("ExpireKeys again: got %d, %v; want 0", n, err)
		}
		// Expired keys are new again, with any request; the others are
		// as they were.
		later := t0.Add(time.Hour)
		for _, key := range []string{"old-0", "old-1", "old-2", "old-stale"} {
			claim(t, s, claimAt("alice", key, "fp-other", later), seckill.KeyClaimed)
		}
		claim(t, s, claimAt("alice", "new", "fp", later), seckill.KeyReplay)
		claim(t, s, claimAt("alice", "old-running", "fp", later), seckill.KeyInFlight)
	})
}

// Stale retries that read the key's row before any of them takes it over
// (on PostgreSQL, where they do not take turns for the whole file) take it
// over once: the takeover names the attempt it read (WHERE attempt = ?),
// so the retries behind the first match nothing once it has committed, and
// find the key in flight. Here the retries are made to wait at the takeover
// together, behind a transaction that holds the row.
func TestPostgresStaleRetriesTakeOverOnce(t *testing.T) {
	db := pgtest.Database(t)
	s, raw := open(t, db), rawDB(t, db)
	t0 := time.Now().Truncate(time.Millisecond)
	claim(t, s, claimAt("alice", "k", "fp", t0), seckill.KeyClaimed)

	hold, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback() }()
	if _, err := hold.Exec("SELECT 1 FROM idempotency_keys WHERE user_id = 'alice' AND idem_key = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	const n = 4
	type result struct {
		state seckill.KeyState
		err   error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			rec, err := s.ClaimKey(context.Background(), claimAt("alice", "k", "fp", t0.Add(2*limit)))
			results <- result{rec.State, err}
		}()
	}
	waitBlocked(t, raw, n)
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	counts := map[seckill.KeyState]int{}
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatalf("ClaimKey: %v", r.err)
		}
		counts[r.state]++
	}
	if want := (map[seckill.KeyState]int{seckill.KeyTakenOver: 1, seckill.KeyInFlight: n - 1}); !maps.Equal(counts, want) {
		t.Errorf("got %v, want %v", counts, want)
	}
}
