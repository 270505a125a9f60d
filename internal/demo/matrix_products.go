package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/loadtest"
)

// The rows over many products: a sale of matrixProducts products at once,
// the buyers spread by loadtest.DefaultSkew (a few hot products and a long
// tail), under the faults that reach the lock and its fence, each with its
// unfenced control. A replica then holds several products' locks at once,
// and a fault catches them all:
//
//   - lease expiry: as the one-product row, the stall ending when another
//     holder of the stalled one's product comes (stallHook).
//   - Redis restarted: the first critical sections of each replica to reach
//     the chaos hook (restartHeld of them) are held there (restartHook)
//     until Redis has been restarted without persistence, which forgets
//     their locks; then the first holder of a held product to come (it
//     took the forgotten lock) lets them all go. The other critical
//     sections pass: a replica has a few rounds at work at once
//     (seckill's commit line), and one held in every one of them would
//     leave no round for that holder.
//     They write after their successor read: the fence refuses them; without
//     it, they write back what they read, and oversell.
//   - replica killed: one replica, a process of its own, stalls in every
//     critical section (a chaos pause) and is killed with SIGKILL once two
//     holders or more are stalled there (its seckill_chaos_paused gauge),
//     holding their products' locks (seckill_locks_held). Fenced, a
//     purchase writes in one transaction after its stall, so the kill
//     leaves nothing half-written; the unfenced sequence stalls between its
//     two writes (the order is in, the stock not yet down), and the kill
//     leaves those products oversold.
//
// The restart and kill rows send their buyers at the pace of the burst
// spread over faultWindow, for faultWindow at least and then until their
// fault's phases are done (pacedByFault), so that buyers keep coming after
// the fault however long it takes to come; they have no repeat buyers.
const matrixProducts = 500

// productsFault is a many-products row's fault other than lease expiry.
type productsFault int

const (
	noProductsFault productsFault = iota
	productsRestart
	productsKill
)

// Settings of the kill rows: a short lease, so that the products the
// killed replica held are sold by the other before the sale ends.
const killTTL = time.Second

// productsRows are the matrix's rows over many products.
func productsRows() []row {
	r := func(fault string, f productsFault, expired, unsafe bool, why string) row {
		return row{mode: app.LockRedis, products: matrixProducts, label: fmt.Sprintf("%d products", matrixProducts),
			fault: fault, pfault: f, expired: expired, unsafe: unsafe, oversell: unsafe, why: why}
	}
	return []row{
		r("lease expiry", noProductsFault, true, false,
			"leases of several products ran out mid-purchase, and the fence refused each late write"),
		r("lease expiry, no fence", noProductsFault, true, true,
			"without the fence the late writes land, product by product"),
		r("Redis restarted", productsRestart, false, false,
			"Redis forgot the locks of the products held across its restart; their next holders' tokens came from its clock, larger, and the fence refused the held writes"),
		r("Redis restarted, no fence", productsRestart, false, true,
			"without the fence the holders Redis forgot write back what they read, after their successors sold"),
		r("replica killed", productsKill, false, false,
			"the killed replica's critical sections wrote nothing: each writes in one transaction, after its checks"),
		r("replica killed, no fence", productsKill, false, true,
			"the unfenced sequence writes twice, and the kill came between: orders without their stock change"),
	}
}

// productsEvidence is what a restart or kill row's sale showed of its
// fault.
type productsEvidence struct {
	missing string // why the fault was not injected, "" when it was
	// held is the critical sections held at the restart, or those the
	// victim was stalled in when it was killed; products the products
	// they held (restart).
	held, products int
	// overlaps counts the critical sections, after the restart, of a
	// product held across it.
	overlaps int64
}

// productsSale is a many-products row's sale: the matrix's over
// matrixProducts products, spread over faultWindow without repeat buyers
// for a restart or a kill, which runSale paces by its fault.
func (r row) productsSale(o options) loadtest.Config {
	sale := o.sale
	sale.Products, sale.Skew = r.products, loadtest.DefaultSkew
	if r.pfault != noProductsFault {
		if sale.Buyers > 0 {
			sale.BurstWindow = max(sale.BurstWindow, faultWindow)
		}
		sale.RepeatShare = 0
	}
	return sale
}

// pacedByFault makes a fault row's sale, a burst of Buyers spread over
// BurstWindow, last as long as its fault's phases: the same pace (Buyers
// every BurstWindow) as a steady rate, until end is closed, faultDeadline
// at most. The caller closes end once the fault is done and BurstWindow
// has passed, so that the sale is at least the burst it was. A burst
// spread over a fixed window would end, on a slow machine, before a fault
// whose phases need buyers after it (a restart's next holder of a held
// product): the row would then show no fault. A sale of another shape is
// left as it is.
func pacedByFault(sale loadtest.Config, end <-chan struct{}) loadtest.Config {
	if sale.Buyers == 0 || sale.BurstWindow == 0 {
		return sale
	}
	rate := int(math.Ceil(float64(sale.Buyers) / sale.BurstWindow.Seconds()))
	sale.Rate, sale.Duration = rate, faultDeadline
	sale.MaxRequests = int(math.Ceil(float64(rate) * faultDeadline.Seconds()))
	sale.Buyers, sale.BurstWindow = 0, 0
	sale.End = end
	return sale
}

// runProductsRow runs a restart or kill row's sale into res: it starts the
// replicas, injects the fault while the load test sells, and keeps the
// evidence.
func runProductsRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	cfg, _ := res.config(o, rds.addr)
	logger = logger.With("mode", res.mode, "fault", res.fault)
	specs := []replicaSpec{{cfg: cfg}, {cfg: cfg}}
	var hook *restartHook
	switch res.pfault {
	case productsRestart:
		hook = newRestartHook()
		for i := range specs {
			specs[i].cfg.Chaos = hook.runFor(i)
		}
	case productsKill:
		if o.command == nil {
			res.err = errors.New("the kill rows need replicas as processes of their own (no replica command)")
			return
		}
		for i := range specs {
			specs[i].cfg.LockTTL = killTTL
		}
		specs[1].cfg.ChaosPause, specs[1].cfg.ChaosProb = victimPause, 1
		specs[1].command = o.command
	}
	c, err := startReplicas(ctx, specs, logger)
	if err != nil {
		res.err = err
		return
	}
	sale := res.productsSale(o)
	sale.Targets, sale.AdminToken = c.urls, cfg.AdminToken
	sale.ProgressMode = loadtest.ProgressOff
	sale.Report, sale.ReportJSON = "", ""
	sale.NoVisualization = true

	fctx, stopFault := context.WithCancel(ctx)
	faultDone := make(chan productsEvidence, 1)
	end := make(chan struct{})
	window := sale.BurstWindow
	sale = pacedByFault(sale, end)
	start := time.Now()
	go func() {
		var ev productsEvidence
		if hook != nil {
			ev = hook.inject(fctx, rds)
		} else {
			ev = killHolder(fctx, c)
		}
		wait(fctx, time.Until(start.Add(window)), nil)
		close(end)
		faultDone <- ev
	}()
	res.rep, res.err = loadtest.Run(ctx, sale, &res.output)
	stopFault()
	res.pev = <-faultDone
	if hook != nil {
		hook.release() // a sale that ended before the fault
	}
	res.ran = ctx.Err() == nil
	res.fenceRejected, res.leaseLost = c.counters()
	if err := c.Close(); err != nil && res.err == nil {
		res.err = fmt.Errorf("clean up: %w", err)
	}
}

// killHolder waits until two holders or more of the victim (the
// cluster's replica process) are stalled in their critical sections, and
// kills it.
func killHolder(ctx context.Context, c *cluster) productsEvidence {
	victim := c.processes[0]
	var ev productsEvidence
	err := awaitFault(ctx, func() (bool, error) {
		n, err := scrapeGauge(ctx, victim.url, "seckill_chaos_paused")
		ev.held = int(n)
		return n >= 2, err
	})
	if err != nil {
		ev.missing = fmt.Sprintf("two of the victim's holders were never stalled at once (last seen: %d): %v", ev.held, err)
		return ev
	}
	if n, err := scrapeGauge(ctx, victim.url, "seckill_locks_held"); err != nil || int(n) < ev.held {
		ev.missing = fmt.Sprintf("%d holders stalled, yet the victim holds %d locks (%v)", ev.held, n, err)
		return ev
	}
	if err := victim.kill(); err != nil {
		ev.missing = err.Error()
	}
	return ev
}

// restartHook is the Redis-restart rows' chaos hook, shared by the
// replicas of one sale (they run in this process). Until the restart, the
// first restartHeld critical sections of each replica are held at the
// hook, and the others pass; after it, one of a product not held passes,
// and the first of a product held (its lock, forgotten by Redis, taken
// again) lets every held one go, and passes.
type restartHook struct {
	mu        sync.Mutex
	restarted bool
	held      map[int64]int // the products of the held critical sections
	sections  int           // critical sections held now
	byReplica map[int]int   // critical sections held, by replica
	overlaps  int64
	gate      chan struct{}
	once      sync.Once
}

// restartHeld is how many critical sections of each replica the restart
// rows hold: fewer than the rounds a replica may have at work at once.
const restartHeld = 2

func newRestartHook() *restartHook {
	return &restartHook{held: map[int64]int{}, byReplica: map[int]int{}, gate: make(chan struct{})}
}

// runFor is the hook of replica i.
func (h *restartHook) runFor(i int) func(ctx context.Context, products []int64) {
	return func(ctx context.Context, products []int64) { h.run(ctx, i, products) }
}

func (h *restartHook) run(ctx context.Context, replica int, products []int64) {
	h.mu.Lock()
	if h.restarted {
		for _, p := range products {
			if h.held[p] > 0 {
				h.overlaps++
				h.release()
				break
			}
		}
		h.mu.Unlock()
		return
	}
	if h.byReplica[replica] >= restartHeld {
		h.mu.Unlock()
		return
	}
	h.byReplica[replica]++
	for _, p := range products {
		h.held[p]++
	}
	h.sections++
	h.mu.Unlock()
	select {
	case <-h.gate:
	case <-ctx.Done():
	}
	h.mu.Lock()
	for _, p := range products {
		if h.held[p]--; h.held[p] == 0 {
			delete(h.held, p)
		}
	}
	h.sections--
	h.byReplica[replica]--
	h.mu.Unlock()
}

// release lets every held critical section go.
func (h *restartHook) release() { h.once.Do(func() { close(h.gate) }) }

// restartMinProducts is how many products' critical sections are held
// when Redis restarts.
const restartMinProducts = 3

// inject waits until critical sections of restartMinProducts products are
// held, restarts Redis, and waits for a holder of a held product to come
// (the hook then lets them go), or for the deadline.
func (h *restartHook) inject(ctx context.Context, rds *redisHandle) productsEvidence {
	var ev productsEvidence
	err := awaitFault(ctx, func() (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		ev.held, ev.products = h.sections, len(h.held)
		return ev.products >= restartMinProducts, nil
	})
	if err != nil {
		ev.missing = fmt.Sprintf("the sale never held %d products' critical sections (held: %d): %v", restartMinProducts, ev.products, err)
		return ev
	}
	if err := rds.restart(context.WithoutCancel(ctx)); err != nil {
		ev.missing = "restart Redis: " + err.Error()
		return ev
	}
	h.mu.Lock()
	h.restarted = true
	ev.held, ev.products = h.sections, len(h.held)
	h.mu.Unlock()
	err = awaitFault(ctx, func() (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		ev.overlaps = h.overlaps
		return ev.overlaps >= 1, nil
	})
	if err != nil {
		ev.missing = "no holder of a product held across the restart came after it: " + err.Error()
	}
	return ev
}

// productsLegend is the table's note on the rows over many products.
func productsLegend() string {
	return strings.Join([]string{
		fmt.Sprintf("%d products: the sale sells that many at once, the buyers spread by %s; each product is checked on its own. Redis", matrixProducts, loadtest.DefaultSkew),
		fmt.Sprintf("restarted: each replica's first %d critical sections are held until Redis has restarted, then until a later holder of a", restartHeld),
		fmt.Sprintf("held product comes (the lock Redis forgot, taken again). replica killed: one replica, a process of its own (lock TTL %v), pauses in every critical", killTTL),
		"section and is killed once two of its holders pause there; unfenced, the pause is between the order's insert and the stock's write.",
		fmt.Sprintf("Both send their buyers at the pace of the burst over %v, for %v at least and until the fault is done, without repeat buyers.", faultWindow, faultWindow),
	}, "\n")
}

// productsMissing says what evidence of a restart or kill row's fault the
// sale lacks, or "" when it has it all.
func (r *result) productsMissing() string {
	switch {
	case r.pev.missing != "":
		return r.pev.missing
	case r.pfault == productsRestart && !r.unsafe && r.fenceRejected == 0:
		return "the fence refused no late write"
	}
	return ""
}

// productsFaultText is a restart or kill row's evidence, in words.
func (r *result) productsFaultText() string {
	var s string
	switch r.pfault {
	case productsRestart:
		s = fmt.Sprintf("Redis restarted with %d critical sections of %d products held; later holders of a held product: %d; leases lost: %d",
			r.pev.held, r.pev.products, r.pev.overlaps, r.leaseLost)
	case productsKill:
		s = fmt.Sprintf("the victim was killed with %d holders stalled in their critical sections", r.pev.held)
	}
	if !r.unsafe && r.pfault == productsRestart {
		s += fmt.Sprintf(", late writes refused by the fence: %d", r.fenceRejected)
	}
	return s
}
