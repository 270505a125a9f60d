// Package subscription is one Pub/Sub connection to a Redis deployment,
// shared by everything in a process that listens on its channels. A
// listener names a channel and a function; the package subscribes when a
// channel gets its first listener and unsubscribes when it loses its last,
// opens the connection with the first listener and closes it with the
// last, and replaces a connection that went silent. It knows nothing of
// locks: the lock's hand-off listens here for the messages its scripts
// publish (package queue's grants, package redlock's wake-ups).
//
// A subscription per listener would cost a connection each (post 5 in
// docs/lock.md's References shares one per process, too). Messages published while the connection is down
// are lost, and a listener must not depend on every one arriving (the
// lock's waiters re-check by themselves).
//
// The channel table is guarded by one mutex, and this file is the only one
// that takes it. One goroutine owns the connection (conn.go): it alone
// sends SUBSCRIBE and UNSUBSCRIBE, each time for the difference between
// the table and what the server has, so that whatever the order in which
// listeners come and go, the last command leaves the server with the table.
// A second goroutine reads the connection and hands each message to the
// listeners of its channel.
package subscription

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is how a Subscriber treats its connection.
type Config struct {
	// Health is how long the connection may stay silent before it is
	// pinged; a ping unanswered for as long again means the connection
	// is dead (a peer gone without a FIN), and it is replaced. It also
	// bounds every call on the connection. Default 5 s.
	Health time.Duration
	// Backoff is the wait after the n-th failed read in a row.
	Backoff func(n int) time.Duration
	// StopAll (a test's control) makes a listener's Stop remove every
	// listener of its channel, also those added after it.
	StopAll bool
}

// DefaultHealth is Config.Health's default.
const DefaultHealth = 5 * time.Second

// Subscriber is the shared subscription of one Redis deployment.
type Subscriber struct {
	client redis.UniversalClient
	cfg    Config

	mu       sync.Mutex
	channels map[string][]*Listener // the table: who listens on what
	conn     *conn                  // open while the table is not empty
	closed   bool
	// ended tracks every connection's goroutines, also those of one
	// closed with its last listener, until they have returned.
	ended sync.WaitGroup
}

// Listener is one listener on one channel.
type Listener struct {
	s       *Subscriber
	channel string
	fn      func(payload string)
	ready   chan struct{} // closed once the server confirmed the channel
	stopped bool          // guarded by s.mu
}

// New returns the Subscriber of the deployment behind client. It opens no
// connection until something listens.
func New(client redis.UniversalClient, cfg Config) *Subscriber {
	if cfg.Health <= 0 {
		cfg.Health = DefaultHealth
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	return &Subscriber{client: client, cfg: cfg, channels: make(map[string][]*Listener)}
}

// Listen calls fn with the payload of every message published on channel
// from the moment the server confirms the subscription (Ready) until Stop.
// fn runs on the goroutine that reads the connection, one message at a
// time: it must be quick. After Close, Listen returns a Listener that is
// never ready.
func (s *Subscriber) Listen(channel string, fn func(payload string)) *Listener {
	ln := &Listener{s: s, channel: channel, fn: fn, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ln.stopped = true
		return ln
	}
	old := s.channels[channel]
	s.channels[channel] = append(old, ln)
	switch {
	case s.conn == nil:
		s.conn = s.open()
	case len(old) > 0 && s.conn.sent[channel]:
		close(ln.ready) // the server already sends this channel
	default:
		s.conn.sync()
	}
	return ln
}

// Ready is closed once the server has confirmed the listener's channel:
// a message published after that reaches fn.
func (ln *Listener) Ready() <-chan struct{} { return ln.ready }

// Stop ends the listener: fn is not called after Stop returns, unless a
// call is under way. The last listener of a channel unsubscribes it; the
// last listener of all closes the connection.
func (ln *Listener) Stop() {
	s := ln.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if ln.stopped {
		return
	}
	ln.stopped = true
	rest := s.channels[ln.channel][:0]
	for _, o := range s.channels[ln.channel] {
		if o != ln && !s.cfg.StopAll {
			rest = append(rest, o)
			continue
		}
		o.stopped = true
	}
	if len(rest) > 0 {
		s.channels[ln.channel] = rest
		return
	}
	delete(s.channels, ln.channel)
	if len(s.channels) == 0 {
		s.conn.close()
		s.conn = nil
		return
	}
	s.conn.sync()
}

// Close stops every listener, closes the connection, and waits until every
// goroutine of the Subscriber has returned.
func (s *Subscriber) Close() {
	s.mu.Lock()
	s.closed = true
	for _, ls := range s.channels {
		for _, ln := range ls {
			ln.stopped = true
		}
	}
	clear(s.channels)
	if s.conn != nil {
		s.conn.close()
		s.conn = nil
	}
	s.mu.Unlock()
	s.ended.Wait()
}

// Channels is how many channels the Subscriber listens on.
func (s *Subscriber) Channels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.channels)
}

// open starts a connection for the table; caller holds s.mu.
func (s *Subscriber) open() *conn {
	c := newConn(s)
	s.ended.Add(2)
	go func() {
		defer s.ended.Done()
		c.own()
	}()
	go func() {
		defer s.ended.Done()
		c.read()
	}()
	return c
}

// wanted is the table's channels, for c to bring the server in line with;
// none once c is no longer the Subscriber's connection.
func (s *Subscriber) wanted(c *conn) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := make(map[string]bool, len(s.channels))
	if s.conn != c {
		return want
	}
	for ch := range s.channels {
		want[ch] = true
	}
	return want
}

// confirmed: the server sends each of channels on c, as it has just said
// (fresh) or said before: their listeners are ready. A channel it has not
// confirmed yet is left out.
func (s *Subscriber) confirmed(c *conn, channels []string, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return
	}
	for _, ch := range channels {
		if fresh {
			c.sent[ch] = true
		}
		if !c.sent[ch] {
			continue
		}
		for _, ln := range s.channels[ch] {
			select {
			case <-ln.ready:
			default:
				close(ln.ready)
			}
		}
	}
}

// unsubscribed: the server no longer sends channel on c.
func (s *Subscriber) unsubscribed(c *conn, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(c.sent, channel)
}

// unconfirmed: c is a new connection, on which the server has confirmed
// nothing yet.
func (s *Subscriber) unconfirmed(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(c.sent)
}

// deliver hands payload to the listeners of channel on c.
func (s *Subscriber) deliver(c *conn, channel, payload string) {
	s.mu.Lock()
	if s.conn != c {
		s.mu.Unlock()
		return
	}
	ls := append([]*Listener(nil), s.channels[channel]...)
	s.mu.Unlock()
	for _, ln := range ls {
		ln.fn(payload)
	}
}
