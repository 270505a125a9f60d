package subscription

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// conn is one life of a Subscriber's connection, from its first listener
// to its last (or Close): a goroutine that owns it (own) and one that
// reads it (read).
type conn struct {
	s         *Subscriber
	changed   chan struct{}           // capacity 1: the table changed
	replace   chan chan *redis.PubSub // from the reader: the connection is dead
	closing   chan struct{}
	closeOnce sync.Once
	first     *redis.PubSub // what both goroutines start with
	// sent are the channels the server has confirmed it sends on the
	// current connection. Guarded by s.mu.
	sent map[string]bool
}

func newConn(s *Subscriber) *conn {
	c := &conn{
		s:       s,
		changed: make(chan struct{}, 1),
		replace: make(chan chan *redis.PubSub),
		closing: make(chan struct{}),
		// No channel yet: go-redis connects on the first command.
		first: s.client.Subscribe(context.Background()),
		sent:  make(map[string]bool),
	}
	c.changed <- struct{}{} // the first listener's channel
	return c
}

// sync asks the owner to bring the server in line with the table; caller
// holds s.mu.
func (c *conn) sync() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// close ends the connection; its goroutines return soon after.
func (c *conn) close() { c.closeOnce.Do(func() { close(c.closing) }) }

// own serves the table's changes and the reader's requests, one at a
// time, until the connection is closed.
func (c *conn) own() {
	ps := c.first
	asked := map[string]bool{} // what the commands sent on ps asked for
	for {
		select {
		case <-c.changed:
			want := c.s.wanted(c)
			var add, drop, kept []string
			for ch := range want {
				if asked[ch] {
					kept = append(kept, ch)
				} else {
					add = append(add, ch)
				}
			}
			for ch := range asked {
				if !want[ch] {
					drop = append(drop, ch)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.Health)
			if len(add) > 0 {
				_ = ps.Subscribe(ctx, add...) // go-redis subscribes again after a reconnect
			}
			if len(drop) > 0 {
				_ = ps.Unsubscribe(ctx, drop...)
			}
			cancel()
			// A channel that lost its last listener and got a new one before
			// this turn was never unsubscribed: it needs no command, and its
			// new listeners no confirmation.
			c.s.confirmed(c, kept, false)
			asked = want
		case reply := <-c.replace:
			want := c.s.wanted(c)
			chans := make([]string, 0, len(want))
			for ch := range want {
				chans = append(chans, ch)
			}
			c.s.unconfirmed(c) // nothing is confirmed on the new one yet
			old := ps
			ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.Health)
			ps = c.s.client.Subscribe(ctx, chans...)
			cancel()
			_ = old.Close()
			asked = want
			reply <- ps
		case <-c.closing:
			_ = ps.Close()
			return
		}
	}
}

// reconnect asks the owner for a new connection, subscribed to every
// channel of the table, in place of one found dead; nil once closing.
func (c *conn) reconnect() *redis.PubSub {
	reply := make(chan *redis.PubSub, 1)
	select {
	case c.replace <- reply:
	case <-c.closing:
		return nil
	}
	select {
	case ps := <-reply:
		return ps
	case <-c.closing:
		return nil
	}
}

// read reads the connection until it is closed. go-redis reconnects and
// subscribes again after an error it sees; a connection that died silently
// is found by the health check: after a silent interval a ping, and after
// a second one a new connection.
func (c *conn) read() {
	ps := c.first
	health := c.s.cfg.Health
	failures, pinged := 0, false
	for {
		// Every call on the connection has a deadline, a new connection's
		// handshake too, which a client with ContextTimeoutEnabled would
		// otherwise wait for forever on a server that never answers.
		ctx, cancel := context.WithTimeout(context.Background(), health)
		msg, err := ps.ReceiveTimeout(ctx, health)
		cancel()
		select {
		case <-c.closing:
			return
		default:
		}
		var nerr net.Error
		switch {
		case err != nil && errors.As(err, &nerr) && nerr.Timeout():
			if pinged {
				if ps = c.reconnect(); ps == nil {
					return
				}
				pinged = false
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), health)
			pinged = ps.Ping(ctx) == nil
			cancel()
			continue
		case err != nil:
			failures++
			if !c.pause(failures) {
				return
			}
			continue
		}
		failures, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				c.s.confirmed(c, []string{m.Channel}, true)
			} else {
				c.s.unsubscribed(c, m.Channel)
			}
		case *redis.Message:
			c.s.deliver(c, m.Channel, m.Payload)
		}
	}
}

// pause waits out the backoff after the n-th failed read in a row, and
// reports false if the connection was closed meanwhile.
func (c *conn) pause(n int) bool {
	t := time.NewTimer(c.s.cfg.Backoff(n))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closing:
		return false
	}
}
