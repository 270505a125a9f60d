package loadtest

import (
	"net/http"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// maxDistinctErrors caps the transport error messages kept for the report: a
// dead target produces one message per request, all alike.
const maxDistinctErrors = 10

// liveCounts are the running totals the progress line reads while the
// attack goroutine writes them.
type liveCounts struct {
	done, created, conflict, busy, errors atomic.Uint64
}

// tally accumulates the outcomes of the attack. Only the goroutine draining
// Vegeta's results touches it, except live, which is atomic.
type tally struct {
	start time.Time

	requests, repeats, created, unknown int
	byStatus                            map[int]int
	byKey, repeatByKey                  map[string]int
	transportErrors                     map[string]int
	createdByUser                       map[string]int

	all, purchases []time.Duration
	lastCreated    time.Duration // end of the last 201, from start
	end            time.Duration // end of the last answer, from start
	events         []event       // every answer, in arrival order: the report's charts

	byProduct map[int64]*productTally

	live liveCounts
}

// productTally is what the attack saw of one product.
type productTally struct {
	requests, created, unknown int
	createdByUser              map[string]int
	purchases                  []time.Duration // latencies of the 201s
	lastCreated                time.Duration   // end of the last 201, from start
	soldOutEnds                []time.Duration // ends of sold_out answers, from start
}

func newTally(start time.Time) *tally {
	return &tally{
		start:           start,
		byStatus:        map[int]int{},
		byKey:           map[string]int{},
		repeatByKey:     map[string]int{},
		transportErrors: map[string]int{},
		createdByUser:   map[string]int{},
		byProduct:       map[int64]*productTally{},
	}
}

// product is what the attack saw of product id (nothing yet: a zero
// tally).
func (t *tally) product(id int64) *productTally {
	p := t.byProduct[id]
	if p == nil {
		p = &productTally{createdByUser: map[string]int{}}
		t.byProduct[id] = p
	}
	return p
}

// add records one result and returns its outcome.
func (t *tally) add(r *vegeta.Result) outcome {
	o := classify(r)
	t.requests++
	t.byStatus[o.status]++
	t.byKey[o.key()]++
	if o.repeat {
		t.repeats++
		t.repeatByKey[o.key()]++
	}
	if o.unknown() {
		t.unknown++
	}
	if o.status == 0 {
		if _, seen := t.transportErrors[o.err]; seen || len(t.transportErrors) < maxDistinctErrors {
			t.transportErrors[o.err]++
		}
	}

	end := r.End().Sub(t.start)
	t.end = max(t.end, end)
	t.all = append(t.all, r.Latency)
	t.events = append(t.events, event{end: end, latency: r.Latency, key: o.key()})
	p := t.product(productOf(r.URL))
	p.requests++
	if o.unknown() {
		p.unknown++
	}
	switch {
	case o.created():
		t.created++
		t.createdByUser[o.user]++
		t.purchases = append(t.purchases, r.Latency)
		t.lastCreated = max(t.lastCreated, end)
		p.created++
		p.createdByUser[o.user]++
		p.purchases = append(p.purchases, r.Latency)
		p.lastCreated = max(p.lastCreated, end)
	case o.code == codeSoldOut:
		p.soldOutEnds = append(p.soldOutEnds, end)
	}

	t.live.done.Add(1)
	switch {
	case o.created():
		t.live.created.Add(1)
	case o.status == http.StatusConflict:
		t.live.conflict.Add(1)
	case o.status == http.StatusServiceUnavailable:
		t.live.busy.Add(1)
	default:
		t.live.errors.Add(1)
	}
	return o
}

// soldOutAt is when the product was seen sold out: the first sold_out
// answer that ended after its last 201. Zero when there was none.
func (p *productTally) soldOutAt() time.Duration {
	var first time.Duration
	for _, e := range p.soldOutEnds {
		if e >= p.lastCreated && (first == 0 || e < first) {
			first = e
		}
	}
	return first
}

// soldOutAt is when the whole sale was seen to be over: when the last of
// its products was seen sold out, if every product sold was (zero
// otherwise, and when none sold out).
func (t *tally) soldOutAt() time.Duration {
	var last time.Duration
	for _, p := range t.byProduct {
		if p.created == 0 && len(p.soldOutEnds) == 0 {
			continue
		}
		at := p.soldOutAt()
		if at == 0 {
			return 0
		}
		last = max(last, at)
	}
	return last
}
