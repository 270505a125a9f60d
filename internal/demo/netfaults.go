package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/fakeclock"
	"github.com/seckill-ref/seckill/internal/faultproxy"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/loadtest"
)

// The matrix's network faults, on replica 1's links only, injected in its
// first critical section (between its reads and its write), where it
// holds the lock:
//
//   - link cut: replica 1's link to Redis goes through a faultproxy, which
//     partitions it. Its renewals are held, its lease runs out in Redis,
//     and another replica takes the lock over.
//   - clock jump: Redlock over three redis-servers; replica 1 cannot reach
//     the third (its proxy resets the connections), so it holds a bare
//     majority. The second node's clock jumps 2 x the TTL forward
//     (internal/fakeclock): replica 1's key there expires at once, and
//     another replica takes nodes 2 and 3, a majority of its own.
//
// Each is made certain by counting, not timing. The other replicas' buyers
// wait at a door (a server of their own in front of each, which holds every
// request but reads) until the fault is in place, so replica 1 holds the
// sale's first lock, and its first critical section, with the whole stock
// still unsold, is where the fault lands. The critical section then waits
// until another replica has sold (the link stays cut until then), and
// writes: the fence refuses that write; without the fence it lands on the
// stock the others sold, and oversells.
// The timings leave room for a loaded machine, where a replica serving a
// burst of a thousand buyers in the demo's own process is slow to run
// anything else; none of them decides whether the fault happened.
const (
	// linkTTL: renewals (every TTL/3) must still keep replica 1's lease
	// until the link is cut, or the partition holds nothing. At 200 ms a
	// late renewal now and then let the lease run out first.
	linkTTL = 2 * time.Second
	// clockTTL and clockNodeTimeout: Redlock's default node timeout
	// (TTL/100, at most 50 ms) is shorter than a busy replica takes to
	// read a node's answer, and then it wins no majority for seconds. A
	// tenth of the lease leaves the lease its validity.
	clockTTL         = 5 * time.Second
	clockNodeTimeout = clockTTL / 10
	// netLockWait is the buyers' wait for the lock: a replica can take
	// seconds to serve its burst before its first acquisition, and with
	// the default 2 s every buyer could give up first, leaving no
	// critical section for the fault. It covers takeoverWait, so that
	// buyers still wait while the others take over.
	netLockWait = 9 * time.Second
	// takeoverWait bounds the critical section's wait for another replica
	// to sell; it is shorter than the service's bound on a batch's work
	// (10 s), so the write still comes. On a loaded machine the takeover
	// (linkTTL, then the waiters' re-check) can take more than 5 s; the
	// wait ends as soon as the others sold, so only a row whose fault
	// failed waits it out.
	takeoverWait = 8 * time.Second
	// firstHoldWait bounds how long the other replicas' buyers wait at the
	// door for the fault before they go in anyway (the row then shows no
	// fault).
	firstHoldWait = 10 * time.Second
)

// netFault names a network fault of the matrix.
type netFault string

const (
	faultLinkCut   netFault = "link cut"
	faultClockJump netFault = "clock jump"
)

// netRun is one network-fault sale's set-up: what it started, the gate of
// the other replicas, replica 1's hook, and what the hook saw.
type netRun struct {
	fault netFault
	proxy *faultproxy.Proxy
	clock *fakeclock.Clock
	nodes []*redisproc.Server

	gate     chan struct{} // closed once the fault is in place: the doors let buyers in
	gateOnce sync.Once

	mu     sync.Mutex
	others []*app.Server // every replica but the first, once started
	fired  bool          // the hook has injected the fault
	seen   netEvidence
}

// netEvidence is what replica 1's hook saw of its fault.
type netEvidence struct {
	// sold is the orders the other replicas made while replica 1 was in
	// the critical section the fault caught; 0 if they made none before
	// takeoverWait.
	sold int64
	// length is how long the critical section waited, from the fault to
	// the write.
	length time.Duration
	// held is the bytes of replica 1's Redis link that the partition was
	// holding when it healed (link cut).
	held int64
}

// startNet starts what the row's fault needs beyond the matrix's Redis
// and returns the configuration of replica i (from 0).
func startNet(ctx context.Context, f netFault, base app.Config, redisAddr string) (*netRun, func(i int) app.Config, error) {
	n := &netRun{fault: f, gate: make(chan struct{})}
	base.LockWait = max(base.LockWait, netLockWait)
	var err error
	switch f {
	case faultLinkCut:
		if n.proxy, err = faultproxy.Start(redisAddr); err != nil {
			return nil, nil, err
		}
		base.LockTTL, base.LockRenew = linkTTL, true
		return n, func(i int) app.Config {
			cfg := base
			if i == 0 {
				cfg.RedisAddr = n.proxy.Addr()
				cfg.Chaos = n.hook
			}
			return cfg
		}, nil
	case faultClockJump:
		if _, err := exec.LookPath("redis-server"); err != nil {
			return nil, nil, redisproc.ErrNotInstalled
		}
		if n.clock, err = fakeclock.New(); err != nil {
			return nil, nil, err
		}
		for i := range 3 {
			var env []string
			if i == 1 {
				env = n.clock.Env()
			}
			s, err := redisproc.StartEnv(ctx, env)
			if err != nil {
				return nil, nil, errors.Join(err, n.Close())
			}
			n.nodes = append(n.nodes, s)
		}
		if n.proxy, err = faultproxy.Start(n.nodes[2].Addr()); err != nil {
			return nil, nil, errors.Join(err, n.Close())
		}
		n.proxy.Reject()
		base.LockTTL, base.LockRenew, base.RedlockNodeTimeout = clockTTL, true, clockNodeTimeout
		direct := []string{n.nodes[0].Addr(), n.nodes[1].Addr(), n.nodes[2].Addr()}
		return n, func(i int) app.Config {
			cfg := base
			cfg.RedisAddrs = direct
			if i == 0 {
				cfg.RedisAddrs = []string{direct[0], direct[1], n.proxy.Addr()}
				cfg.Chaos = n.hook
			}
			return cfg
		}, nil
	}
	return nil, nil, fmt.Errorf("unknown network fault %q", f)
}

// openGate lets the other replicas take buyers.
func (n *netRun) openGate() { n.gateOnce.Do(func() { close(n.gate) }) }

// othersSold is the orders the other replicas have made.
func (n *netRun) othersSold() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var sold int64
	for _, s := range n.others {
		sold += s.Metrics().Purchases(seckill.OutcomeCreated)
	}
	return sold
}

// hook is replica 1's chaos. The first time (the sale's first critical
// section, since the others wait for the gate), it injects the fault,
// lets the others in, and returns once they have sold, or after
// takeoverWait; later calls return at once.
func (n *netRun) hook(ctx context.Context, _ []int64) {
	n.mu.Lock()
	first := !n.fired
	n.fired = true
	n.mu.Unlock()
	if !first {
		return
	}
	before := n.othersSold() // 0: the gate is shut
	start := time.Now()
	switch n.fault {
	case faultLinkCut:
		n.proxy.Partition()
	case faultClockJump:
		n.clock.Jump(2 * clockTTL)
	}
	n.openGate()
	deadline := time.NewTimer(takeoverWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var sold int64
wait:
	for {
		if sold = n.othersSold() - before; sold > 0 {
			break
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	ev := netEvidence{sold: sold, length: time.Since(start)}
	if n.fault == faultLinkCut {
		ev.held = n.proxy.Stats().Waiting
		n.proxy.Heal()
	}
	n.mu.Lock()
	n.seen = ev
	n.mu.Unlock()
}

// evidence says what the fault did, and what of it is missing ("" when
// nothing is).
func (n *netRun) evidence() (injected, missing string) {
	n.mu.Lock()
	fired, ev := n.fired, n.seen
	n.mu.Unlock()
	if !fired {
		return "", fmt.Sprintf("replica 1 held no lock with a purchase to write within %v", firstHoldWait)
	}
	if ev.sold == 0 {
		return "", fmt.Sprintf("no other replica sold within %v of the %s", takeoverWait, n.fault)
	}
	switch n.fault {
	case faultLinkCut:
		if ev.held == 0 {
			return "", "the partition held no byte of replica 1's Redis link"
		}
		injected = fmt.Sprintf("replica 1's Redis link cut %v in its critical section (%d bytes held)",
			ev.length.Round(time.Millisecond), ev.held)
	case faultClockJump:
		injected = fmt.Sprintf("node 2's clock %v ahead in replica 1's critical section, for the %v it waited",
			n.clock.Offset(), ev.length.Round(time.Millisecond))
	}
	return injected + fmt.Sprintf("; meanwhile the others took the lock and sold %d", ev.sold), ""
}

// Close stops what startNet started.
func (n *netRun) Close() error {
	n.openGate()
	var errs []error
	if n.proxy != nil {
		errs = append(errs, n.proxy.Close())
	}
	for _, s := range n.nodes {
		errs = append(errs, s.Close())
	}
	if n.clock != nil {
		errs = append(errs, n.clock.Close())
	}
	return errors.Join(errs...)
}

// door serves a replica's handler on a loopback port of its own and holds
// every request but reads (GET, HEAD) until open is closed: buyers wait at
// the door, while the load test's set-up and reads go through.
type door struct {
	url     string
	next    http.Handler
	open    <-chan struct{}
	waiting atomic.Int64 // requests held now
	srv     *http.Server
	done    chan error
}

func openDoor(h http.Handler, open <-chan struct{}) (*door, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &door{url: "http://" + ln.Addr().String(), next: h, open: open, done: make(chan error, 1)}
	d.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: d}
	go func() { d.done <- d.srv.Serve(ln) }()
	return d, nil
}

func (d *door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		d.waiting.Add(1)
		select {
		case <-d.open:
			d.waiting.Add(-1)
		case <-r.Context().Done():
			d.waiting.Add(-1)
			return // the buyer left: nobody reads an answer
		}
	}
	d.next.ServeHTTP(w, r)
}

// Close stops the door once its requests are answered (open must be
// closed by then).
func (d *door) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := d.srv.Shutdown(ctx)
	if serr := <-d.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// runNetRow is runRow for a network-fault row: its own set-up, replicas of
// different configurations, and the evidence of the fault.
func runNetRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	base, _ := res.config(o, rds.addr)
	n, each, err := startNet(ctx, res.net, base, rds.addr)
	switch {
	case errors.Is(err, redisproc.ErrNotInstalled):
		res.skip = "needs redis-server"
		return
	case errors.Is(err, fakeclock.ErrNoCompiler):
		res.skip = "needs a C compiler (cc), to move a redis-server's clock"
		return
	case errors.Is(err, errors.ErrUnsupported):
		// fakeclock outside Linux: the row cannot inject its fault here.
		res.skip = "needs Linux (LD_PRELOAD), to move a redis-server's clock"
		return
	}
	if err != nil {
		res.err = err
		return
	}
	defer func() {
		if err := n.Close(); err != nil && res.err == nil {
			res.err = fmt.Errorf("clean up: %w", err)
		}
	}()
	specs := make([]replicaSpec, res.replicas(o))
	for i := range specs {
		specs[i] = replicaSpec{cfg: each(i)}
	}
	c, err := startReplicas(ctx, specs, logger.With("mode", res.mode, "fault", res.fault))
	if err != nil {
		res.err = err
		return
	}
	defer func() {
		if err := c.Close(); err != nil && res.err == nil {
			res.err = fmt.Errorf("clean up: %w", err)
		}
	}()
	n.mu.Lock()
	n.others = c.servers[1:]
	n.mu.Unlock()
	targets := []string{c.urls[0]}
	for _, s := range c.servers[1:] {
		d, err := openDoor(s.Handler(), n.gate)
		if err != nil {
			res.err = err
			return
		}
		defer func() {
			n.openGate()
			if err := d.Close(); err != nil && res.err == nil {
				res.err = fmt.Errorf("clean up: %w", err)
			}
		}()
		targets = append(targets, d.url)
	}
	sale := o.sale
	sale.Targets, sale.AdminToken = targets, base.AdminToken
	sale.ProgressMode = loadtest.ProgressOff
	sale.Report, sale.ReportJSON = "", ""
	sale.NoVisualization = true
	// The bound on the others' wait starts with the sale.
	bound := time.AfterFunc(firstHoldWait, n.openGate)
	res.rep, res.err = loadtest.Run(ctx, sale, &res.output)
	bound.Stop()
	res.ran = ctx.Err() == nil
	res.fenceRejected, res.leaseLost = c.counters()
	res.injected, res.notInjected = n.evidence()
}

// netLegend is the table's note on the network-fault rows.
func netLegend() string {
	return strings.Join([]string{
		"link cut, clock jump: on replica 1 alone, in the sale's first critical section (the other replicas' buyers wait at a",
		fmt.Sprintf("door until it is in place). link cut: replica 1's link to Redis is partitioned (lock TTL %v, renewed) until", linkTTL),
		fmt.Sprintf("another replica has sold. clock jump: Redlock on 3 redis-servers (node timeout %v), replica 1 reaching 2 of them;", clockNodeTimeout),
		fmt.Sprintf("the second node's clock jumps %v (2 x the TTL) ahead, and another replica takes a majority of its own and sells.", 2*clockTTL),
		fmt.Sprintf("Then replica 1 writes. A sale where nobody else sold meanwhile runs again, %d sales at most, else: fault not injected.", maxRowAttempts),
	}, "\n")
}
