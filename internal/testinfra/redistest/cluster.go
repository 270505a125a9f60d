package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/redisproc"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
)

// StartCluster starts a Redis Cluster of n masters (no replicas) for the
// duration of t, the 16384 slots split evenly among them, and returns once
// every node reports cluster_state:ok. extra is appended to every node's
// command line (a password, say: "--requirepass", pw, "--masterauth", pw).
func StartCluster(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	buses := make([]int, n)
	for i := range nodes {
		// The cluster bus listens on a port of its own, port+10000 unless
		// told otherwise, which may be taken or out of range.
		bus, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "1000",
		}, extra...)
		nodes[i], buses[i] = Start(t, args...), bus
	}
	password := passwordOf(extra)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	clients := make([]*redis.Client, n)
	for i, s := range nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), Password: password})
		defer clients[i].Close()
	}
	per := 16384 / n
	for i, c := range clients {
		from, to := i*per, (i+1)*per-1
		if i == n-1 {
			to = 16383
		}
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err(); err != nil {
			t.Fatalf("cluster node %s: ADDSLOTSRANGE %d %d: %v", nodes[i].Addr(), from, to, err)
		}
		if i > 0 {
			if err := c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", nodes[0].Port, buses[0]).Err(); err != nil {
				t.Fatalf("cluster node %s: MEET: %v", nodes[i].Addr(), err)
			}
		}
	}
	err := poll.UntilNil(ctx, 20*time.Millisecond, func() error {
		for i, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				return fmt.Errorf("node %s: %q", nodes[i].Addr(), info)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for the cluster to be ok: %v", err)
	}
	return nodes
}

// passwordOf finds --requirepass's value in args.
func passwordOf(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			return args[i+1]
		}
	}
	return ""
}
