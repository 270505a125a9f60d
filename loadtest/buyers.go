package loadtest

import (
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Request URLs carry the buyer in their fragment ("#user=ID" or "#repeat=ID").
// A fragment is never sent to the server, so the service sees exactly the API
// request, but Vegeta copies the URL into each Result: that is the only way to
// know, for a 409 or a transport error, which buyer it was for.
const (
	fragmentUser   = "user="
	fragmentRepeat = "repeat="
)

// buyers hands out purchase requests: one fresh user id per request, each
// for a product drawn with the sale's skew, except that a share of them
// reuse an earlier buyer (for that buyer's product), spread round-robin
// over the targets. It is safe for concurrent use, as Vegeta's workers call
// it at once.
type buyers struct {
	targets  []string
	products []string // product ids, as in the URL; index 0 the hottest
	prefix   string   // user ids are prefix + a decimal sequence number
	share    float64
	header   http.Header // shared read-only: vegeta copies it per request

	mu      sync.Mutex
	n       uint64   // requests handed out
	fresh   uint64   // fresh user ids handed out
	product []int32  // by fresh user's sequence number: the product it buys
	demand  []int    // by product: the fresh users who buy it
	bought  []uint64 // sequence numbers of users who got a 201
	rng     *rand.Rand
	pick    func() int

	sent atomic.Uint64 // mirrors n for the progress line, without the lock
}

// newBuyers returns a source of purchase requests for products on targets,
// spread over the products by skew. seed makes the choice of products and
// of repeat buyers reproducible in tests.
func newBuyers(targets []string, products []int64, skew Skew, prefix string, share float64, seed uint64) *buyers {
	ids := make([]string, len(products))
	for i, id := range products {
		ids[i] = strconv.FormatInt(id, 10)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &buyers{
		targets:  targets,
		products: ids,
		prefix:   prefix,
		share:    share,
		header:   http.Header{"Content-Type": []string{"application/json"}},
		demand:   make([]int, len(products)),
		rng:      rng,
		pick:     skew.Picker(len(products), rng),
	}
}

// next returns the URL and user id of the next request and whether it is a
// repeat. Repeats are spread evenly: request n is a repeat when the running
// total floor(n*share) steps up, so any prefix of the run holds the share.
func (b *buyers) next() (target, user string, repeat bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.n
	b.n++
	b.sent.Store(b.n)
	base := b.targets[n%uint64(len(b.targets))]

	repeat = n > 0 && b.fresh > 0 &&
		math.Floor(float64(n+1)*b.share) > math.Floor(float64(n)*b.share)
	var seq uint64
	switch {
	case !repeat:
		seq = b.fresh
		b.fresh++
		p := b.pick()
		b.product = append(b.product, int32(p))
		b.demand[p]++
	case len(b.bought) > 0:
		// Prefer someone who already holds an order: the service must
		// refuse them whatever else happened.
		seq = b.bought[b.rng.IntN(len(b.bought))]
	default:
		// Before the first 201, any earlier user.
		seq = b.rng.Uint64N(b.fresh)
	}
	return purchaseURL(base, b.products[b.product[seq]]), b.prefix + strconv.FormatUint(seq, 10), repeat
}

// purchaseURL is the purchase endpoint of product id on target.
func purchaseURL(target, id string) string { return target + "/api/v1/products/" + id + "/purchase" }

// demandOf returns how many fresh users were sent to buy each product, by
// index.
func (b *buyers) demandOf() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.demand)
}

// recordPurchase records that user got a 201, making them a repeat candidate.
func (b *buyers) recordPurchase(user string) {
	seq, ok := b.seq(user)
	if !ok {
		return
	}
	b.mu.Lock()
	b.bought = append(b.bought, seq)
	b.mu.Unlock()
}

// seq returns the sequence number of one of this run's user ids.
func (b *buyers) seq(user string) (uint64, bool) {
	rest, ok := strings.CutPrefix(user, b.prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// counts returns how many requests and fresh users were handed out.
func (b *buyers) counts() (requests, fresh uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.fresh
}

// targeter adapts next to Vegeta. It never fails, so it never stops the
// attack: the pacer and the duration do.
func (b *buyers) targeter() vegeta.Targeter {
	return func(t *vegeta.Target) error {
		target, user, repeat := b.next()
		key := fragmentUser
		if repeat {
			key = fragmentRepeat
		}
		t.Method = http.MethodPost
		t.URL = target + "#" + key + user
		// User ids are [A-Za-z0-9_.:-] by construction: no JSON escaping.
		t.Body = []byte(`{"user_id":"` + user + `"}`)
		t.Header = b.header
		return nil
	}
}

// productOf reads the product id out of a purchase or read URL
// (.../api/v1/products/ID, then "/purchase" or a fragment); 0 if there is
// none.
func productOf(rawURL string) int64 {
	_, rest, ok := strings.Cut(rawURL, "/api/v1/products/")
	if !ok {
		return 0
	}
	end := strings.IndexAny(rest, "/#?")
	if end >= 0 {
		rest = rest[:end]
	}
	id, _ := strconv.ParseInt(rest, 10, 64)
	return id
}

// buyerOf reads the buyer back from a result URL written by targeter.
func buyerOf(rawURL string) (user string, repeat bool) {
	_, frag, ok := strings.Cut(rawURL, "#")
	if !ok {
		return "", false
	}
	if u, ok := strings.CutPrefix(frag, fragmentRepeat); ok {
		return u, true
	}
	u, _ := strings.CutPrefix(frag, fragmentUser)
	return u, false
}
