package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/store"
)

// shutdownTimeout bounds each replica's graceful shutdown. The load test
// has collected every answer before the demo shuts down, so only requests
// it abandoned (after a Ctrl-C) can still be in flight, and they end with
// their context.
const shutdownTimeout = 5 * time.Second

// cluster is the replicas of one sale, on loopback ports, sharing one
// Redis and one SQLite file in a temporary directory of their own, as
// separate processes on one host would. They run in this process, except
// those of the local lock mode and of no lock when there is a replica
// command (and no Chaos function), which run as processes of their own.
type cluster struct {
	dir       string // the temporary directory; removed by Close
	db        string // the SQLite file in it, or the PostgreSQL URL
	servers   []*app.Server
	processes []*replicaProcess
	urls      []string // base URLs, one per replica

	cancel context.CancelFunc // ends every Serve
	wg     sync.WaitGroup     // Serve goroutines

	mu       sync.Mutex
	serveErr []error

	closeOnce sync.Once
	closeErr  error
}

// startCluster creates the temporary directory and n replicas of cfg on it
// (cfg's Addr is replaced, and so is its Database unless it is a PostgreSQL
// URL, which the benchmarks set), each serving on its own 127.0.0.1 port.
// On error it undoes what it did.
func startCluster(ctx context.Context, n int, cfg app.Config, command ReplicaCommand, logger *slog.Logger) (*cluster, error) {
	// A Chaos function cannot be passed to a process (Config.Environ).
	if (cfg.Lock != app.LockLocal && cfg.Lock != app.LockNone) || cfg.Chaos != nil {
		command = nil
	}
	specs := make([]replicaSpec, n)
	for i := range specs {
		specs[i] = replicaSpec{cfg: cfg, command: command}
	}
	return startReplicas(ctx, specs, logger)
}

// replicaSpec is one replica to start: its configuration, and the command
// that runs it as a process of its own (nil: it runs in this process).
type replicaSpec struct {
	cfg     app.Config
	command ReplicaCommand
}

// startReplicas is startCluster with a configuration per replica: they
// share the first one's database.
func startReplicas(ctx context.Context, specs []replicaSpec, logger *slog.Logger) (*cluster, error) {
	dir, err := os.MkdirTemp("", "seckill-demo-")
	if err != nil {
		return nil, fmt.Errorf("create the temporary directory: %w", err)
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &cluster{dir: dir, db: filepath.Join(dir, "seckill.db"), cancel: cancel}
	if len(specs) > 0 && store.IsPostgres(specs[0].cfg.Database) {
		c.db = specs[0].cfg.Database
	}
	for i, spec := range specs {
		cfg := spec.cfg
		cfg.Addr = "127.0.0.1:0"
		cfg.Database = c.db
		cfg.ShutdownTimeout = shutdownTimeout
		var err error
		if spec.command != nil {
			err = c.addProcess(ctx, spec.command, cfg, logger.With("replica", i+1))
		} else {
			err = c.add(ctx, serveCtx, cfg, logger.With("replica", i+1))
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start replica %d: %w", i+1, err), c.Close())
		}
	}
	return c, nil
}

// add builds one replica and starts serving it. Serve runs until Close,
// not until ctx ends: after a Ctrl-C the load test still reads the sale
// back through the replicas, so they must outlive the signal.
func (c *cluster) add(ctx, serveCtx context.Context, cfg app.Config, logger *slog.Logger) error {
	srv, err := app.NewServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return errors.Join(err, srv.Close())
	}
	c.servers = append(c.servers, srv)
	c.urls = append(c.urls, "http://"+ln.Addr().String())
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := srv.Serve(serveCtx, ln); err != nil {
			c.mu.Lock()
			c.serveErr = append(c.serveErr, fmt.Errorf("replica on %s: %w", ln.Addr(), err))
			c.mu.Unlock()
		}
	}()
	return nil
}

// addProcess starts one replica as a process of its own.
func (c *cluster) addProcess(ctx context.Context, command ReplicaCommand, cfg app.Config, logger *slog.Logger) error {
	r, err := startProcess(ctx, command, cfg, logger)
	if err != nil {
		return err
	}
	c.processes = append(c.processes, r)
	c.urls = append(c.urls, r.url)
	return nil
}

// pids lists the replica processes' ids, separated by commas.
func (c *cluster) pids() string {
	ids := make([]string, len(c.processes))
	for i, p := range c.processes {
		ids[i] = strconv.Itoa(p.proc.Pid())
	}
	return strings.Join(ids, ", ")
}

// counters sums the replicas' fence rejections and lost leases: what the
// sale's report cannot see from outside, and what shows that a fault
// really happened and what stopped it. Replica processes are not counted:
// they run the local lock or none, which have neither fences nor leases.
func (c *cluster) counters() (fenceRejected, leasesLost int64) {
	for _, s := range c.servers {
		fenceRejected += s.Metrics().FenceRejections()
		leasesLost += s.Metrics().LeasesLost()
	}
	return fenceRejected, leasesLost
}

// evidence is what the counter designs' replicas counted that shows a
// fault happened: counters built from the database (Redis had lost them),
// queued orders one writer took over from another, and the orders taken
// and not yet written right now.
type evidence struct {
	builds, claimed, pending int64
}

// counterEvidence sums the in-process replicas' evidence.
func (c *cluster) counterEvidence() evidence {
	var ev evidence
	for _, s := range c.servers {
		m := s.Metrics()
		ev.builds += m.CounterBuilds()
		ev.claimed += m.OrdersTakenOver()
		ev.pending += m.OrdersPendingNow()
	}
	return ev
}

// Close shuts every replica down (graceful, then closing its Locker, Redis
// client and database) and removes the temporary directory. It is safe to
// call more than once; the Redis belongs to the caller.
func (c *cluster) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		errs := c.serveErr
		for _, s := range c.servers {
			errs = append(errs, s.Close())
		}
		for _, p := range c.processes {
			errs = append(errs, p.stop(shutdownTimeout))
		}
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", c.dir, err))
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
