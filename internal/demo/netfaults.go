package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/fakeclock"
	"github.com/seckill-ref/seckill/internal/faultproxy"
	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/loadtest"
)

// The matrix's network faults, each on replica 1 only, inside its
// critical sections (between its reads and its write), one at a time,
// until one of them has seen replica 2 sell meanwhile: the burst sells out
// in well under a second, so a fault that waited for a chance would
// rarely meet one.
//
//   - link cut: replica 1's link to Redis goes through a faultproxy, which
//     partitions it for 2 x the TTL. Its lease runs out in Redis; the
//     critical section waits out the partition and until replica 2 has sold
//     (so replica 2 holds the lock and has claimed the fence), then writes.
//   - clock jump: Redlock over three redis-servers; replica 1 cannot reach
//     the third (its proxy resets the connections), so it holds a bare
//     majority. The second node's clock jumps 2 x the TTL forward
//     (internal/fakeclock): replica 1's key there expires at once, and
//     replica 2 takes nodes 2 and 3, a majority of its own, and sells; then
//     replica 1 writes.
//
// The fence refuses those writes; without it they oversell.
const (
	linkTTL  = 200 * time.Millisecond
	clockTTL = 2 * time.Second // Redlock's node timeout is TTL/100: 20 ms
	// takeoverWait bounds a critical section's wait for replica 2 to sell.
	takeoverWait = 5 * time.Second
)

type netFault string

const (
	faultLinkCut   netFault = "link cut"
	faultClockJump netFault = "clock jump"
)

// netRun is one network-fault row's set-up: what it started, the hook of
// replica 1, and what the hook saw.
type netRun struct {
	fault   netFault
	proxy   *faultproxy.Proxy
	clock   *fakeclock.Clock
	nodes   []*redisproc.Server
	other   atomic.Pointer[app.Server] // replica 2, once started
	busy    atomic.Bool                // a fault is in progress
	faults  atomic.Int64               // faults injected
	takeovs atomic.Int64               // ... during which replica 2 sold
}

// startNet starts what the row's fault needs beyond the matrix's Redis
// and returns the configuration of replica i (0 or 1).
func startNet(ctx context.Context, f netFault, base app.Config, redisAddr string) (*netRun, func(i int) app.Config, error) {
	n := &netRun{fault: f}
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
				return nil, nil, errors.Join(fmt.Errorf("the clock-jump row needs redis-server: %w", err), n.Close())
			}
			n.nodes = append(n.nodes, s)
		}
		if n.proxy, err = faultproxy.Start(n.nodes[2].Addr()); err != nil {
			return nil, nil, errors.Join(err, n.Close())
		}
		n.proxy.Reject()
		base.LockTTL, base.LockRenew = clockTTL, true
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

// hook is replica 1's chaos: work as the other rows do and, until a fault
// has seen replica 2 sell, the fault.
func (n *netRun) hook(ctx context.Context) {
	if !wait(ctx, faultWork, nil) {
		return
	}
	if n.takeovs.Load() > 0 || !n.busy.CompareAndSwap(false, true) {
		return
	}
	defer n.busy.Store(false)
	other := n.other.Load()
	if other == nil {
		return
	}
	sold := other.Metrics().Purchases(seckill.OutcomeCreated)
	start := time.Now()
	var length time.Duration
	switch n.fault {
	case faultLinkCut:
		n.proxy.Partition()
		defer n.proxy.Heal()
		length = 2 * linkTTL
	case faultClockJump:
		n.clock.Jump(2 * clockTTL)
	}
	n.faults.Add(1)
	deadline := time.NewTimer(length + takeoverWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if time.Since(start) >= length && other.Metrics().Purchases(seckill.OutcomeCreated) > sold {
			n.takeovs.Add(1)
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// injected says whether the fault happened and what it did, for the
// verdict: "" if it did not.
func (n *netRun) injected() string {
	f, tk := n.faults.Load(), n.takeovs.Load()
	if f == 0 || tk == 0 {
		return ""
	}
	var what string
	switch n.fault {
	case faultLinkCut:
		what = fmt.Sprintf("%d bytes held", n.proxy.Stats().Held)
	case faultClockJump:
		what = fmt.Sprintf("the second node's clock %v ahead", n.clock.Offset())
	}
	return fmt.Sprintf("%d faults, %d with replica 2 selling while replica 1 held the lock; %s", f, tk, what)
}

// Close stops what startNet started.
func (n *netRun) Close() error {
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

// runNetRow is runRow for a network-fault row: its own set-up, two
// replicas of different configurations, and the check that the fault
// happened.
func runNetRow(ctx context.Context, o options, rds *redisHandle, logger *slog.Logger, res *result) {
	base, _ := res.config(o, rds.addr)
	n, each, err := startNet(ctx, res.net, base, rds.addr)
	if errors.Is(err, redisproc.ErrNotInstalled) {
		res.skip = "needs redis-server"
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
	specs := make([]replicaSpec, max(o.replicas, 2))
	for i := range specs {
		specs[i] = replicaSpec{cfg: each(i)}
	}
	c, err := startReplicas(ctx, specs, logger.With("mode", res.mode, "fault", res.fault))
	if err != nil {
		res.err = err
		return
	}
	n.other.Store(c.servers[1])
	sale := o.sale
	sale.Targets, sale.AdminToken = c.urls, base.AdminToken
	sale.ProgressMode = loadtest.ProgressOff
	sale.Report, sale.ReportJSON = "", ""
	sale.NoVisualization = true
	res.rep, res.err = loadtest.Run(ctx, sale, &res.output)
	res.ran = ctx.Err() == nil
	res.fenceRejected, res.leaseLost = c.counters()
	res.injected = n.injected()
	if err := c.Close(); err != nil && res.err == nil {
		res.err = fmt.Errorf("clean up: %w", err)
	}
}

// netLegend is the table's note on the network-fault rows.
func netLegend() string {
	return strings.Join([]string{
		fmt.Sprintf("link cut: in replica 1's critical section, its link to Redis is partitioned for %v (2 x its %v TTL), and its",
			2*linkTTL, linkTTL),
		"write waits until replica 2 has sold. clock jump: Redlock on 3 redis-servers, replica 1 reaching 2 of them; in its",
		fmt.Sprintf("critical section the second node's clock jumps %v (2 x the TTL) forward, and replica 2 takes a majority of its own.",
			2*clockTTL),
		"Each fault repeats until replica 2 has sold during one; a row where none did is \"fault not injected\".",
	}, "\n")
}
