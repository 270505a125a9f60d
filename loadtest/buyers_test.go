package loadtest

import (
	"net/url"
	"strings"
	"sync"
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestBuyersFreshUsersAreDistinct(t *testing.T) {
	b := newBuyers([]string{"http://a"}, []int64{7}, Skew{}, "lt-x-", 0, 1)
	seen := map[string]bool{}
	for range 1000 {
		_, user, repeat := b.next()
		if repeat || seen[user] || !strings.HasPrefix(user, "lt-x-") {
			t.Fatalf("got user %q (repeat %v, seen %v), want a fresh lt-x- user", user, repeat, seen[user])
		}
		seen[user] = true
	}
	if req, fresh := b.counts(); req != 1000 || fresh != 1000 {
		t.Errorf("got counts %d, %d, want 1000, 1000", req, fresh)
	}
}

func TestBuyersRepeatShare(t *testing.T) {
	for _, share := range []float64{0.05, 0.25, 1} {
		b := newBuyers([]string{"http://a"}, []int64{7}, Skew{}, "lt-x-", share, 1)
		seen := map[string]bool{}
		repeats := 0
		for i := range 1000 {
			_, user, repeat := b.next()
			if repeat {
				repeats++
				if !seen[user] {
					t.Fatalf("share %v: request %d repeats %q, who never came before", share, i, user)
				}
			} else if seen[user] {
				t.Fatalf("share %v: fresh request %d reuses %q", share, i, user)
			}
			seen[user] = true
		}
		// The first request cannot be a repeat; otherwise the share is exact.
		if want := int(share * 1000); repeats != want && repeats != want-1 {
			t.Errorf("share %v: got %d repeats in 1000, want %d", share, repeats, want)
		}
	}
}

func TestBuyersRepeatsPreferBuyers(t *testing.T) {
	b := newBuyers([]string{"http://a"}, []int64{7}, Skew{}, "lt-x-", 0.5, 1)
	_, first, _ := b.next()
	b.recordPurchase(first)
	b.recordPurchase("someone-else") // not of this run: ignored
	for range 100 {
		_, user, repeat := b.next()
		if repeat && user != first {
			t.Fatalf("got repeat of %q, want the only buyer %q", user, first)
		}
	}
}

func TestBuyersRoundRobin(t *testing.T) {
	b := newBuyers([]string{"http://a", "http://b:81/prefix", "https://c"}, []int64{42}, Skew{}, "lt-x-", 0.3, 1)
	want := []string{
		"http://a/api/v1/products/42/purchase",
		"http://b:81/prefix/api/v1/products/42/purchase",
		"https://c/api/v1/products/42/purchase",
	}
	for i := range 30 {
		target, _, _ := b.next()
		if target != want[i%3] {
			t.Fatalf("request %d: got %s, want %s", i, target, want[i%3])
		}
	}
}

func TestTargeterRequestShape(t *testing.T) {
	b := newBuyers([]string{"http://a"}, []int64{42}, Skew{}, "lt-x-", 0.5, 1)
	tr := b.targeter()
	for i := range 10 {
		var tgt vegeta.Target
		if err := tr(&tgt); err != nil {
			t.Fatal(err)
		}
		req, err := tgt.Request()
		if err != nil {
			t.Fatal(err)
		}
		user, repeat := buyerOf(tgt.URL)
		if req.Method != "POST" || req.URL.RequestURI() != "/api/v1/products/42/purchase" ||
			req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: got %s %s %v, want a JSON POST to the purchase path", i, req.Method, req.URL.RequestURI(), req.Header)
		}
		if string(tgt.Body) != `{"user_id":"`+user+`"}` || repeat != (i%2 == 1) {
			t.Errorf("request %d: got body %s, buyer %q repeat %v", i, tgt.Body, user, repeat)
		}
		// The buyer rides in the fragment, which never reaches the server.
		if u, _ := url.Parse(tgt.URL); u.Fragment == "" || strings.Contains(req.URL.RequestURI(), "user") {
			t.Errorf("request %d: got URL %s, want the buyer only in the fragment", i, tgt.URL)
		}
	}
}

func TestTargeterConcurrentUse(t *testing.T) {
	b := newBuyers([]string{"http://a", "http://b"}, []int64{1}, Skew{}, "lt-x-", 0.1, 1)
	tr := b.targeter()
	var wg sync.WaitGroup
	users := make([][]string, 8)
	for g := range users {
		wg.Go(func() {
			for range 200 {
				var tgt vegeta.Target
				_ = tr(&tgt)
				if u, repeat := buyerOf(tgt.URL); !repeat {
					users[g] = append(users[g], u)
					if g == 0 {
						b.recordPurchase(u)
					}
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, us := range users {
		for _, u := range us {
			if seen[u] {
				t.Fatalf("fresh user %q handed out twice", u)
			}
			seen[u] = true
		}
	}
	if req, _ := b.counts(); req != 1600 || b.sent.Load() != 1600 {
		t.Errorf("got %d requests (%d sent), want 1600", req, b.sent.Load())
	}
}
