package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// readyTimeout bounds each wait of a Sentinel deployment for a state it
// must reach: replication up, quorum reachable, a failover done.
const readyTimeout = 30 * time.Second

// SentinelOptions are the passwords of a Sentinel deployment; the zero
// value has none.
type SentinelOptions struct {
	// Password is the master's and the replica's requirepass (and the
	// replica's masterauth, and the sentinels' auth-pass).
	Password string
	// SentinelPassword is the sentinels' own requirepass.
	SentinelPassword string
}

// Sentinel is the smallest Redis deployment that survives the loss of its
// master: a master, one replica, and three sentinels watching them, all
// real processes owned by one test and stopped when it ends. The
// sentinels act within about 2 s (redisproc.SentinelConfig's timings).
type Sentinel struct {
	Name      string  // the master's name at the sentinels
	Master    *Server // the master at the start
	Replica   *Server // its replica, the master after a failover
	Sentinels []*redisproc.Server
	opts      SentinelOptions
	t         testing.TB
}

// StartSentinel starts the deployment and returns once the replica is in
// sync and every sentinel sees the replica and a quorum of sentinels that
// can authorise a failover.
func StartSentinel(t testing.TB, name string, opts SentinelOptions) *Sentinel {
	t.Helper()
	s := &Sentinel{Name: name, opts: opts, t: t}
	s.Master = Start(t, s.serverArgs()...)
	s.Replica = Start(t, append(s.serverArgs(), "--replicaof", "127.0.0.1", portOf(s.Master.Addr()))...)
	s.await("the replica to sync", func(ctx context.Context) error {
		return linkUp(ctx, s.client(s.Replica.Addr()))
	})
	group, err := redisproc.StartSentinels(context.Background(), 3, redisproc.SentinelConfig{
		Master:      name,
		MasterAddr:  s.Master.Addr(),
		Replicas:    []string{s.Replica.Addr()},
		AuthPass:    opts.Password,
		RequirePass: opts.SentinelPassword,
	})
	if err != nil {
		t.Fatalf("start redis-sentinel: %v", err)
	}
	t.Cleanup(func() {
		for _, g := range group {
			if err := g.Close(); err != nil {
				t.Errorf("stop redis-sentinel: %v", err)
			}
		}
	})
	s.Sentinels = group
	s.await("the sentinels to see the replica and a quorum", s.canFailOver)
	return s
}

// serverArgs are the arguments of the master and the replica: their
// password, and a full sync sent at once rather than after Redis's default
// 5 s wait for more replicas (repl-diskless-sync-delay).
func (s *Sentinel) serverArgs() []string {
	args := []string{"--repl-diskless-sync-delay", "0"}
	if p := s.opts.Password; p != "" {
		args = append(args, "--requirepass", p, "--masterauth", p)
	}
	return args
}

// Addrs are the sentinels' addresses, for REDIS_SENTINEL_ADDRS.
func (s *Sentinel) Addrs() []string { return redisproc.SentinelAddrs(s.Sentinels) }

// MasterAddrs asks every sentinel which address the master has; an
// unreachable sentinel's entry is "".
func (s *Sentinel) MasterAddrs(ctx context.Context) []string {
	out := make([]string, len(s.Sentinels))
	for i, g := range s.Sentinels {
		c := s.sentinelClient(g.Addr())
		if hp, err := c.GetMasterAddrByName(ctx, s.Name).Result(); err == nil && len(hp) == 2 {
			out[i] = net.JoinHostPort(hp[0], hp[1])
		}
		_ = c.Close()
	}
	return out
}

// WaitMaster polls until every sentinel names addr as the master, or ctx
// ends.
func (s *Sentinel) WaitMaster(ctx context.Context, addr string) error {
	return poll.UntilNil(ctx, 10*time.Millisecond, func() error {
		for _, got := range s.MasterAddrs(ctx) {
			if got != addr {
				return fmt.Errorf("sentinels name %v as the master, want %s", s.MasterAddrs(ctx), addr)
			}
		}
		return nil
	})
}

// Rejoin restarts old (a master that failed) as a replica of the master
// at addr, as an operator brings a failed machine back; it returns once
// the new replica is in sync. The sentinels would turn a returning master
// into a replica themselves, but only after about 10 s of checks.
func (s *Sentinel) Rejoin(ctx context.Context, old *Server, addr string) error {
	args := append(s.serverArgs(), "--replicaof", "127.0.0.1", portOf(addr))
	if err := old.Server.RestartWith(ctx, args...); err != nil {
		return err
	}
	c := s.client(old.Addr())
	defer c.Close()
	return poll.UntilNil(ctx, 10*time.Millisecond, func() error { return linkUp(ctx, c) })
}

// CutReplication stops the replica from receiving the master's writes,
// as a network partition between the two would, while clients still reach
// the master: the replica's connection is closed, and it can no longer
// authenticate to come back. Every write from now on lives on the master
// only, until a failover forgets it. The replica keeps serving what it has.
func (s *Sentinel) CutReplication(ctx context.Context) error {
	replica := s.client(s.Replica.Addr())
	defer replica.Close()
	if err := replica.ConfigSet(ctx, "masterauth", "cut-"+strconv.FormatInt(time.Now().UnixNano(), 36)).Err(); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	master := s.client(s.Master.Addr())
	defer master.Close()
	if err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	return poll.UntilNil(ctx, 5*time.Millisecond, func() error {
		if linkUp(ctx, replica) == nil {
			return errors.New("replication link still up")
		}
		return nil
	})
}

// canFailOver is nil once every sentinel reports a usable quorum and a
// replica it could promote.
func (s *Sentinel) canFailOver(ctx context.Context) error {
	for _, g := range s.Sentinels {
		c := s.sentinelClient(g.Addr())
		err := func() error {
			if err := c.CkQuorum(ctx, s.Name).Err(); err != nil {
				return fmt.Errorf("sentinel %s: %w", g.Addr(), err)
			}
			replicas, err := c.Replicas(ctx, s.Name).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", g.Addr(), err)
			}
			for _, r := range replicas {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					return nil
				}
			}
			return fmt.Errorf("sentinel %s sees no healthy replica: %v", g.Addr(), replicas)
		}()
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Sentinel) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: s.opts.Password, MaxRetries: -1})
}

func (s *Sentinel) sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, Password: s.opts.SentinelPassword, MaxRetries: -1})
}

// await polls cond until it returns nil, failing the test after
// readyTimeout with cond's last error.
func (s *Sentinel) await(what string, cond func(ctx context.Context) error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := poll.UntilNil(ctx, 10*time.Millisecond, func() error { return cond(ctx) }); err != nil {
		s.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// linkUp is nil once the replica behind c is in sync with its master.
func linkUp(ctx context.Context, c *redis.Client) error {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return errors.New("replication link not up yet")
	}
	return nil
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
