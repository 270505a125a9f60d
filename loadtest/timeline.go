package loadtest

import (
	"context"
	"sync"
	"time"
)

// The sale over time: what the HTML report draws.

// MaxSteps is the most steps a Timeline has: enough for a readable chart
// of a sale of any length.
const MaxSteps = 100

// DefaultSampleInterval is how often Run reads the product during the
// attack (Config.SampleInterval).
const DefaultSampleInterval = 50 * time.Millisecond

// maxSamples bounds the samples kept, whatever the run's length.
const maxSamples = 4000

// event is one answer, as the tally saw it.
type event struct {
	end     time.Duration // from the start of the attack
	latency time.Duration
	key     string // outcome.key()
}

// Timeline is the attack cut into equal steps.
type Timeline struct {
	// Step is the width of each step.
	Step time.Duration
	// Steps run from the start of the attack to its last answer.
	Steps []Step
}

// Step is what the answers that ended within one step came to.
type Step struct {
	// Start is the step's start, from the start of the attack.
	Start time.Duration
	// ByOutcome counts the answers by outcome, with Report.ByOutcome's
	// keys ("201", "409 sold_out", ...).
	ByOutcome map[string]int
	// Created201 is the number of 201s up to the end of this step: sold,
	// as the load test saw it.
	Created201 int
	// Latency summarizes the answers that ended in this step.
	Latency Latency
}

// Sample is the product as GET /api/v1/products/:id answered during the
// attack, or the sale's products added up as GET /api/v1/products did:
// sold and stock as the server saw them.
type Sample struct {
	At       time.Duration // when the answer arrived, from the start of the attack
	Stock    int64
	Reserved int64 `json:",omitempty"`
	Sold     int64
}

// buildTimeline cuts events into at most MaxSteps steps of a round width.
func buildTimeline(events []event, elapsed time.Duration) Timeline {
	step := stepWidth(elapsed)
	n := int(elapsed/step) + 1
	tl := Timeline{Step: step, Steps: make([]Step, n)}
	lat := make([][]time.Duration, n)
	for i := range tl.Steps {
		tl.Steps[i] = Step{Start: time.Duration(i) * step, ByOutcome: map[string]int{}}
	}
	for _, e := range events {
		i := min(int(e.end/step), n-1)
		tl.Steps[i].ByOutcome[e.key]++
		lat[i] = append(lat[i], e.latency)
	}
	created := 0
	for i := range tl.Steps {
		created += tl.Steps[i].ByOutcome["201"]
		tl.Steps[i].Created201 = created
		tl.Steps[i].Latency = summarize(lat[i])
	}
	return tl
}

// stepWidth is the smallest round width (1, 2 or 5 times a power of ten,
// from 1 ms) that cuts elapsed into at most MaxSteps steps.
func stepWidth(elapsed time.Duration) time.Duration {
	for unit := time.Millisecond; ; unit *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if w := m * unit; elapsed/w < MaxSteps {
				return w
			}
		}
	}
}

// sampler reads the product every interval until stopped, from its own
// goroutine, one request at a time.
type sampler struct {
	start   time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples []Sample
}

// startSampler starts reading the products through a; interval <= 0
// samples nothing. One product is read alone; several are read with one
// list of every product, less often the more there are (a list of n
// products costs about n/sampleListStep reads of one), so that sampling
// loads the service alike. start is the time samples are measured from.
func startSampler(ctx context.Context, a api, products []Product, interval time.Duration, start time.Time) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{start: start, cancel: cancel, done: make(chan struct{})}
	if interval <= 0 {
		close(s.done)
		return s
	}
	read := func(ctx context.Context) (Product, error) { return a.Product(ctx, products[0].ID) }
	if len(products) > 1 {
		interval *= time.Duration(1 + len(products)/sampleListStep)
		mine := make(map[int64]bool, len(products))
		for _, p := range products {
			mine[p.ID] = true
		}
		read = func(ctx context.Context) (Product, error) {
			all, err := a.Products(ctx)
			var t Product
			for _, p := range all {
				if mine[p.ID] {
					t = addProducts(t, p)
				}
			}
			return t, err
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p, err := read(ctx)
			if err != nil {
				continue // a busy or stopping server: the next tick tries again
			}
			s.mu.Lock()
			if len(s.samples) < maxSamples {
				s.samples = append(s.samples, Sample{At: time.Since(s.start), Stock: p.Stock, Reserved: p.Reserved, Sold: p.Sold})
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// sampleListStep: a sampler of several products lists them every
// interval times 1 + products/sampleListStep.
const sampleListStep = 100

// stop ends the sampling and returns the samples, measured from from.
func (s *sampler) stop(from time.Time) []Sample {
	s.cancel()
	<-s.done
	shift := from.Sub(s.start)
	out := make([]Sample, len(s.samples))
	for i, x := range s.samples {
		x.At -= shift
		out[i] = x
	}
	return out
}
