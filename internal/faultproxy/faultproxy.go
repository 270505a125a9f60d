// Package faultproxy is a TCP proxy that a test or the demo puts on one
// link between two real processes (a replica and its Redis, a replica and
// its database, a Sentinel and its master) so that it can cut or slow
// that link alone, without root and without touching the others.
//
// Partition holds every byte that tries to cross, in both directions, and
// Heal delivers what was held, in order. That is what TCP does across a
// real partition: unacknowledged segments are sent again until they get
// through, so a request sent during the partition can still arrive after
// it, even after the client gave up and closed its socket (the kernel keeps
// sending what was written). A proxy that dropped the bytes instead would
// hide the late arrivals the lock is built to survive. A connection opened
// during a partition is accepted (the kernel completes the handshake of a
// listening socket anyway) but reaches its upstream only after Heal.
//
// SetLatency delays every byte read from then on by the given time, in each
// direction, keeping their order: a request and its reply each take that
// long, so a round trip takes twice as long.
//
// A proxy started with a Namer knows which process each connection comes
// from (on Linux, Processes finds it in /proc), and PartitionClients cuts
// the connections of some processes only. One proxy in front of each
// server, with every process using the proxies' addresses, then makes any
// partition of a group of processes into sides: a server stays reachable
// from its own side, whichever address its clients were told.
//
// Stats counts what the faults did to the traffic, so that a scenario can
// tell a fault that held or delayed bytes from one that met an idle link.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"sync"
	"time"
)

// Proxy listens on a loopback port and forwards each connection to its
// upstream address.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	namer Namer // nil: no names

	mu      sync.Mutex               // guards the fields below
	cut     chan struct{}            // non-nil while partitioned; closed by Heal
	cutIf   func(client string) bool // whose connections the cut holds; nil: all
	reject  bool                     // resetting every connection, until Heal
	latency time.Duration
	conns   map[net.Conn]struct{}
	stats   Stats
}

// Stats is what went through a proxy since it started.
type Stats struct {
	// Connections accepted.
	Connections int64
	// Bytes delivered, client to upstream and upstream to client.
	Up, Down int64
	// Held is the bytes that waited for a partition to heal; Delayed, the
	// bytes that waited for latency.
	Held, Delayed int64
	// Partitions is how many times Partition cut the link, Rejections how
	// many times Reject did; Reset, the connections reset by Reject.
	Partitions, Rejections, Reset int64
	// Waiting is the bytes read from one side and not yet delivered to
	// the other, now.
	Waiting int64
	// With a Namer: the connections accepted from each client, and the
	// bytes waiting now on each client's connections, either way; a
	// client that could not be named is "".
	Clients, WaitingFor map[string]int64
}

// Namer names the process at the other end of a connection the proxy
// accepted, or returns "" when it cannot tell.
type Namer func(c net.Conn) string

// Start listens on a free 127.0.0.1 port and forwards every connection to
// upstream (host:port), until Close.
func Start(upstream string) (*Proxy, error) { return StartNamed(upstream, nil) }

// StartNamed is Start with each connection's client named by namer,
// before any of its bytes is forwarded.
func StartNamed(upstream string, namer Namer) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{upstream: upstream, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}, namer: namer}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients connect to instead of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Partition cuts the link: from now on nothing crosses in either direction
// until Heal. Cutting a cut link does nothing.
func (p *Proxy) Partition() { p.PartitionClients(nil) }

// PartitionClients cuts the connections whose client cut reports true for
// (by the Namer's name; "" for one it could not name), those open now and
// those to come: nothing crosses them in either direction until Heal. The
// others go on. A nil cut cuts them all. Cutting a cut link does nothing.
func (p *Proxy) PartitionClients(cut func(client string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == nil {
		p.cut, p.cutIf = make(chan struct{}), cut
		p.stats.Partitions++
	}
}

// cutFor is the channel that Heal closes if client's connections are cut
// now, else nil. Callers hold p.mu.
func (p *Proxy) cutFor(client string) chan struct{} {
	if p.cut == nil || (p.cutIf != nil && !p.cutIf(client)) {
		return nil
	}
	return p.cut
}

// Reject resets every connection through the proxy, and every new one at
// once, until Heal: the link fails fast, as when a firewall answers with
// resets or the host is unreachable, instead of holding the bytes. What was
// held is lost.
func (p *Proxy) Reject() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reject = true
	p.stats.Rejections++
	for c := range p.conns {
		reset(c)
		p.stats.Reset++
	}
}

// reset closes c with a TCP reset rather than an orderly end.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Heal ends a partition, whose held bytes are then delivered in order, or
// a Reject.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reject = false
	if p.cut != nil {
		close(p.cut)
		p.cut, p.cutIf = nil, nil
	}
}

// Partitioned reports whether the link is cut.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut != nil
}

// SetLatency delays every byte read from now on by d in each direction; 0
// removes the delay (bytes already waiting keep theirs).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	if p.namer != nil {
		st.Clients, st.WaitingFor = maps.Clone(p.stats.Clients), maps.Clone(p.stats.WaitingFor)
	}
	return st
}

// waiting counts n more bytes (or fewer, if negative) read from client's
// connection and not yet delivered. Callers hold p.mu.
func (p *Proxy) waiting(client string, n int64) {
	p.stats.Waiting += n
	if p.namer == nil {
		return
	}
	if p.stats.WaitingFor == nil {
		p.stats.WaitingFor = map[string]int64{}
	}
	p.stats.WaitingFor[client] += n
}

// Close stops listening, closes every connection (held bytes are lost) and
// returns once every goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.cancel()
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			continue
		}
		p.mu.Lock()
		p.stats.Connections++
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(c) })
	}
}

// track registers c for Close; false once the proxy is closing or
// rejecting, and then c has been closed (reset).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		_ = c.Close()
		return false
	}
	if p.reject {
		p.stats.Reset++
		reset(c)
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// serve connects client to the upstream, once the link is not cut, and
// pumps both directions until both are done. The client's bytes are read
// (and counted as waiting) from the start, also during a partition.
func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	defer client.Close()
	name := p.newPeer(client)
	var up net.Conn
	var upHeld bool              // the link was cut when the client came
	ready := make(chan struct{}) // closed once up is connected
	failed := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		held, ok := p.waitOpen(name)
		if !ok {
			close(failed)
			return
		}
		var d net.Dialer
		c, err := d.DialContext(p.ctx, "tcp", p.upstream)
		if err == nil && !p.track(c) {
			err = net.ErrClosed
		}
		if err != nil {
			// The client sees its connection closed, as with a refused one.
			_ = client.Close()
			close(failed)
			return
		}
		up, upHeld = c, held
		close(ready)
		p.pump(name, up, func() (net.Conn, bool) { return client, false }, &p.stats.Down)
	})
	p.pump(name, client, func() (net.Conn, bool) {
		select {
		case <-ready:
			return up, upHeld
		case <-failed:
			return nil, false
		}
	}, &p.stats.Up)
	wg.Wait()
	select {
	case <-ready:
		p.untrack(up)
		_ = up.Close()
	default:
	}
}

// peer is the client of one connection, as the Namer named it. A process
// may be named after it connected (its id is known only once it runs):
// until the Namer knows it, each look at the name asks again.
type peer struct {
	p    *Proxy
	conn net.Conn

	mu   sync.Mutex
	name string // "" until named
}

func (p *Proxy) newPeer(c net.Conn) *peer {
	pr := &peer{p: p, conn: c}
	if p.namer == nil {
		return pr
	}
	pr.name = p.namer(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stats.Clients == nil {
		p.stats.Clients = map[string]int64{}
	}
	p.stats.Clients[pr.name]++
	return pr
}

// get is the client's name, "" while it has none; it asks the Namer again
// while that is so. Callers must not hold p.mu.
func (pr *peer) get() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.name != "" || pr.p.namer == nil {
		return pr.name
	}
	if pr.name = pr.p.namer(pr.conn); pr.name != "" {
		pr.p.mu.Lock()
		pr.p.stats.Clients[""]--
		pr.p.stats.Clients[pr.name]++
		pr.p.mu.Unlock()
	}
	return pr.name
}

// chunk is what one read returned, and when.
type chunk struct {
	b      []byte
	client string // the client's name when it was read, for the counts
	at     time.Time
	// deliverAt is at plus the latency of that moment.
	deliverAt time.Time
	eof       bool
}

// pump copies src to the connection that connect returns (nil: none will
// come; held: it came only once a partition healed, so the bytes read
// before it waited for that partition) through a queue: a reader that
// stamps each chunk
// with its arrival, and a writer that delivers it once its latency has
// passed and client's connections are not cut. The queue is bounded, so a
// held link pushes back on the sender as a full TCP window would.
func (p *Proxy) pump(client *peer, src net.Conn, connect func() (conn net.Conn, held bool), delivered *int64) {
	q := make(chan chunk, 256)
	var readErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				now := time.Now()
				name := client.get()
				p.mu.Lock()
				lat := p.latency
				p.waiting(name, int64(n))
				p.mu.Unlock()
				select {
				case q <- chunk{b: buf[:n], client: name, at: now, deliverAt: now.Add(lat)}:
				case <-p.ctx.Done():
					return
				}
			}
			if errors.Is(err, io.EOF) {
				select {
				case q <- chunk{eof: true}:
				case <-p.ctx.Done():
				}
				return
			}
			if err != nil {
				readErr = err
				return
			}
		}
	})
	broken := false
	var dst net.Conn
	var heldUntil time.Time // chunks read before then waited for a partition
	for c := range q {
		if broken {
			p.mu.Lock()
			p.waiting(c.client, -int64(len(c.b)))
			p.mu.Unlock()
			continue // drain until the reader sees its closed socket
		}
		if dst == nil {
			var held bool
			if dst, held = connect(); dst == nil {
				broken = true
				_ = src.Close()
				p.mu.Lock()
				p.waiting(c.client, -int64(len(c.b)))
				p.mu.Unlock()
				continue
			}
			if held {
				heldUntil = time.Now()
			}
		}
		if c.eof {
			// Half-close: the other side reads EOF after everything sent
			// before it, as it would from the client itself.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			continue
		}
		held, ok := p.await(client, c.deliverAt)
		held = held || c.at.Before(heldUntil)
		// Counted before the write, so that whoever reads the reply also
		// sees it counted.
		p.mu.Lock()
		p.waiting(c.client, -int64(len(c.b)))
		if ok {
			*delivered += int64(len(c.b))
			if held {
				p.stats.Held += int64(len(c.b))
			}
			if c.deliverAt.After(c.at) {
				p.stats.Delayed += int64(len(c.b))
			}
		}
		p.mu.Unlock()
		if ok {
			ok = write(dst, c.b) == nil
		}
		if !ok {
			broken = true
			_ = src.Close() // unblock the reader
		}
	}
	wg.Wait()
	if dst != nil && (readErr != nil || broken) {
		// Reset rather than end: the other side must not wait for bytes
		// that will never come.
		_ = dst.Close()
	}
}

// await waits until t has come and client's connections are not cut, and reports
// whether it waited for a partition; ok is false if the proxy closed
// first.
func (p *Proxy) await(client *peer, t time.Time) (held, ok bool) {
	for {
		if !p.waitUntil(t) {
			return held, false
		}
		name := client.get()
		p.mu.Lock()
		cut := p.cutFor(name)
		p.mu.Unlock()
		if cut == nil {
			return held, true
		}
		held = true
		select {
		case <-cut:
		case <-p.ctx.Done():
			return held, false
		}
	}
}

// waitOpen waits until client's connections are not cut, and reports
// whether it waited for a partition; ok is false if the proxy closed
// first.
func (p *Proxy) waitOpen(client *peer) (held, ok bool) {
	for {
		name := client.get()
		p.mu.Lock()
		cut := p.cutFor(name)
		p.mu.Unlock()
		if cut == nil {
			return held, p.ctx.Err() == nil
		}
		held = true
		select {
		case <-cut:
		case <-p.ctx.Done():
			return held, false
		}
	}
}

// waitUntil waits until t; false if the proxy closed first.
func (p *Proxy) waitUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return p.ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}
