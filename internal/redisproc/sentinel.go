package redisproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// SentinelConfig is what a group of Redis Sentinels monitors, and how
// quickly they act. The zero timings are a test's: Redis's own defaults
// (30 s before a master counts as down, 3 min of failover timeout) would make
// a failover take minutes.
type SentinelConfig struct {
	// Master is the name under which clients ask for the master.
	Master string
	// MasterAddr is the master's 127.0.0.1:port when the sentinels start.
	MasterAddr string
	// Replicas are the master's replicas. The sentinels would learn them
	// from the master's INFO, which they ask for every 10 s; told here,
	// they can fail over at once.
	Replicas []string
	// Quorum is how many sentinels must agree that the master is down.
	// Default: a majority.
	Quorum int
	// DownAfter is how long the master may go without answering before a
	// sentinel considers it down. Default 500 ms.
	DownAfter time.Duration
	// FailoverTimeout bounds a failover's steps; a failed attempt is
	// retried after twice this. Default 2 s.
	FailoverTimeout time.Duration
	// AuthPass is the master's and replicas' password (requirepass), if any.
	AuthPass string
	// RequirePass is the sentinels' own password, if any. They also use it
	// to talk to each other.
	RequirePass string
	// Announce, when set, gives the address that sentinel i (from 0), on
	// addr, announces to the other sentinels and to clients instead (its
	// announce-ip and announce-port): a proxy in front of it, for one. It
	// is called once the ports are chosen, before the sentinels start.
	Announce func(i int, addr string) (string, error)
}

// StartSentinels runs n redis-sentinel processes (redis-server in sentinel
// mode) on free 127.0.0.1 ports, all monitoring cfg.MasterAddr, and returns
// once each answers PING. They know each other from the start (their ids
// and ports are in each other's configuration), rather than after the
// first exchange of hello messages through the master, about 2 s later.
// Each has its own directory and configuration file, which the sentinel
// rewrites as its view changes; Close removes it.
//
// Returning does not mean the group can fail over yet: ask a sentinel
// SENTINEL CKQUORUM for that.
func StartSentinels(ctx context.Context, n int, cfg SentinelConfig) ([]*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNotInstalled
	}
	if n < 1 || cfg.Master == "" || cfg.MasterAddr == "" {
		return nil, errors.New("redisproc: StartSentinels needs n >= 1, a master name and its address")
	}
	if cfg.Quorum == 0 {
		cfg.Quorum = n/2 + 1
	}
	if cfg.DownAfter == 0 {
		cfg.DownAfter = 500 * time.Millisecond
	}
	if cfg.FailoverTimeout == 0 {
		cfg.FailoverTimeout = 2 * time.Second
	}
	var lastErr error
	// As in Start: a port may be taken between the probe and the bind.
	// Each sentinel's port is in the others' configuration, so a retry
	// starts the whole group again.
	for range 5 {
		var group []*Server
		if group, lastErr = startSentinels(ctx, n, cfg); lastErr == nil {
			return group, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startSentinels(ctx context.Context, n int, cfg SentinelConfig) ([]*Server, error) {
	group := make([]*Server, n)
	ids := make([]string, n)
	for i := range group {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		group[i] = &Server{Port: port}
		// A sentinel's id is 40 hex digits.
		id := make([]byte, 20)
		_, _ = rand.Read(id)
		ids[i] = hex.EncodeToString(id)
	}
	closeAll := func() {
		for _, s := range group {
			_ = s.Close()
		}
	}
	announced := make([]string, n)
	for i, s := range group {
		announced[i] = s.Addr()
		if cfg.Announce != nil {
			a, err := cfg.Announce(i, s.Addr())
			if err != nil {
				return nil, fmt.Errorf("redisproc: sentinel %d's announced address: %w", i, err)
			}
			announced[i] = a
		}
	}
	for i, s := range group {
		dir, err := os.MkdirTemp("", "redisproc-sentinel-")
		if err != nil {
			closeAll()
			return nil, err
		}
		s.dir = dir
		s.conf = filepath.Join(dir, "sentinel.conf")
		text, err := sentinelConf(cfg, ids, announced, i)
		if err == nil {
			err = os.WriteFile(s.conf, []byte(text), 0o600)
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("redisproc: sentinel configuration: %w", err)
		}
	}
	for _, s := range group {
		if err := s.start(ctx); err != nil {
			closeAll()
			return nil, err
		}
	}
	return group, nil
}

// sentinelConf is the configuration file of sentinel i of a group whose
// members announce themselves at announced.
func sentinelConf(cfg SentinelConfig, ids, announced []string, i int) (string, error) {
	host, port, err := net.SplitHostPort(cfg.MasterAddr)
	if err != nil {
		return "", err
	}
	m := cfg.Master
	lines := []string{
		"sentinel myid " + ids[i],
		fmt.Sprintf("sentinel monitor %s %s %s %d", m, host, port, cfg.Quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", m, cfg.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", m, cfg.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", m),
	}
	if cfg.AuthPass != "" {
		lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", m, cfg.AuthPass))
	}
	if cfg.RequirePass != "" {
		lines = append(lines, "requirepass "+cfg.RequirePass)
	}
	for _, r := range cfg.Replicas {
		rh, rp, err := net.SplitHostPort(r)
		if err != nil {
			return "", err
		}
		lines = append(lines, fmt.Sprintf("sentinel known-replica %s %s %s", m, rh, rp))
	}
	if cfg.Announce != nil {
		ah, ap, err := net.SplitHostPort(announced[i])
		if err != nil {
			return "", err
		}
		lines = append(lines, "sentinel announce-ip "+ah, "sentinel announce-port "+ap)
	}
	for j, peer := range announced {
		if j != i {
			ph, pp, err := net.SplitHostPort(peer)
			if err != nil {
				return "", err
			}
			lines = append(lines, fmt.Sprintf("sentinel known-sentinel %s %s %s %s", m, ph, pp, ids[j]))
		}
	}
	return strings.Join(lines, "\n") + "\n", nil
}

// RestartWith stops the server and starts it again on the same port, with
// extra in place of the extra arguments it was started with: a failed
// master, for example, that comes back as a replica of the new one
// ("--replicaof", "127.0.0.1", port). Without persistence it starts empty.
func (s *Server) RestartWith(ctx context.Context, extra ...string) error {
	if err := s.Stop(); err != nil {
		return err
	}
	s.args = extra
	return s.start(ctx)
}

// SentinelAddrs returns the sentinels' host:port addresses.
func SentinelAddrs(group []*Server) []string {
	addrs := make([]string, len(group))
	for i, s := range group {
		addrs[i] = s.Addr()
	}
	return addrs
}
