package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/seckill-ref/seckill/internal/redisproc"
)

// clockTick is how often the embedded Redis's clock is advanced. A lease
// then ends at most this much after its TTL, which errs on the safe side
// (a lease a little longer than promised), and a few ticks fit into the
// shortest TTL the service accepts (10 ms).
const clockTick = 5 * time.Millisecond

// redisHandle is the Redis the replicas share, whichever kind it is.
type redisHandle struct {
	addr string
	kind string // what the header says: "redis-server" or "embedded Redis (miniredis)"
	pid  int    // redis-server's process id; 0 for the embedded one

	closeOnce sync.Once
	closeErr  error
	close     func() error
	// restart stops the Redis and starts it again on the same address
	// with no data, as a restart without persistence does.
	restart func(ctx context.Context) error
}

// Close stops the Redis: redis-server by its PID (SIGTERM, then SIGKILL),
// or the embedded server and its clock. It is safe to call more than once.
func (h *redisHandle) Close() error {
	h.closeOnce.Do(func() { h.closeErr = h.close() })
	return h.closeErr
}

// describe is the header's words for this Redis.
func (h *redisHandle) describe() string {
	if h.pid != 0 {
		return fmt.Sprintf("%s on %s (pid %d)", h.kind, h.addr, h.pid)
	}
	return fmt.Sprintf("%s on %s", h.kind, h.addr)
}

// startRedis starts the Redis that mode asks for. In auto mode, a
// redis-server that is not installed means the embedded one, silently; one
// that is installed but fails to start means the embedded one too, with a
// note on warn, since the demo must run on a machine with only Go.
func startRedis(ctx context.Context, mode string, warn io.Writer) (*redisHandle, error) {
	switch mode {
	case redisServer:
		h, err := startServer(ctx)
		if errors.Is(err, redisproc.ErrNotInstalled) {
			err = fmt.Errorf("%w\n-redis embedded (or auto) needs nothing installed", err)
		}
		return h, err
	case redisEmbedded:
		return startEmbedded()
	}
	h, err := startServer(ctx)
	if err == nil {
		return h, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	if !errors.Is(err, redisproc.ErrNotInstalled) {
		fmt.Fprintf(warn, "demo: %v\ndemo: using the embedded Redis instead\n", err)
	}
	return startEmbedded()
}

// startServer runs a redis-server child on a free loopback port, without
// persistence, in its own process group: a Ctrl-C reaches only the demo,
// which then stops the server itself. A demo killed outright takes the
// server with it (redisproc starts it with procutil's guard).
func startServer(ctx context.Context) (*redisHandle, error) {
	srv, err := redisproc.Start(ctx)
	if err != nil {
		return nil, err
	}
	return &redisHandle{addr: srv.Addr(), kind: "redis-server", pid: srv.PID(), close: srv.Close, restart: srv.Restart}, nil
}

// startEmbedded runs miniredis on a free loopback port, and a clock for it:
// miniredis expires keys only when told that time has passed
// (FastForward), so without the clock no lease would ever run out and a
// crashed or stalled holder would block its lock for good.
//
// miniredis's own ClockTTL mode was considered and not taken: it advances
// TTLs on every command, including the commands inside a Lua script, so a
// key could expire between two steps of one lock script, which real Redis
// never does (time stands still during a script). FastForward takes the
// server's lock, which a running script holds, so the ticker advances time
// only between commands and scripts, as Redis does. It also costs one pass
// over the keys per tick, not one per command.
func startEmbedded() (*redisHandle, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("start the embedded Redis: %w", err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go advanceClock(m, stop, done)
	return &redisHandle{
		addr: m.Addr(),
		kind: "embedded Redis (miniredis)",
		close: func() error {
			close(stop)
			<-done
			m.Close()
			return nil
		},
		restart: func(context.Context) error {
			m.Close() // drops every connection, as a dying server does
			m.FlushAll()
			return m.Restart()
		},
	}, nil
}

// advanceClock moves m's TTLs on by the real time elapsed, every clockTick,
// until stop is closed; then it closes done. The elapsed time is measured,
// not assumed from the tick, so a late tick (a busy machine, the race
// detector) does not make leases last longer than their TTL plus one tick.
func advanceClock(m *miniredis.Miniredis, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(clockTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			now := time.Now()
			m.FastForward(now.Sub(last))
			last = now
		}
	}
}
