package fair

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber is the process's one Pub/Sub connection to a Redis deployment
// (one per node in Redlock mode). It listens on the channels of the locks
// that goroutines of this process wait for, and ends when nobody waits.
// Redisson also shares one subscription per lock and process; a
// subscription per waiting goroutine would cost a connection each.
//
// One goroutine owns the connection (own): it alone sends SUBSCRIBE and
// UNSUBSCRIBE and replaces a dead connection, one request at a time, so
// whatever the order in which drivers ask, each command sends what the
// channel map says when it is sent, and the last one matches the wanted
// state. A second goroutine reads the connection (receive).
type subscriber struct {
	client   redis.UniversalClient
	channels map[string]*subEntry // wanted channels; guarded by Locker.mu (events.go)

	syncs      chan syncReq            // to the owner: send (UN)SUBSCRIBE for a channel
	reconnects chan chan *redis.PubSub // to the owner: replace the connection
	closing    chan struct{}           // closed by close
	closeOnce  sync.Once
	done       chan struct{} // closed when both goroutines have ended
}

// subEntry is one driver's wish to hear a lock's channel.
type subEntry struct {
	q         *queue
	ready     chan struct{} // closed when the server confirms the subscription
	confirmed bool          // guarded by Locker.mu
}

// syncReq asks the owner to bring ch in line with the channel map; done
// is closed once the command is sent (or given up).
type syncReq struct {
	ctx  context.Context
	ch   string
	done chan struct{}
}

func newSubscriber(c redis.UniversalClient) *subscriber {
	return &subscriber{
		client:     c,
		channels:   make(map[string]*subEntry),
		syncs:      make(chan syncReq),
		reconnects: make(chan chan *redis.PubSub),
		closing:    make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// subscribe adds q's channel to the subscriptions (one per Redis
// deployment; several in Redlock mode), starting them if needed, and waits
// (at most one re-check interval) for the servers' confirmations: a
// message published before that would be missed and only made up for by
// the re-check.
func (l *Locker) subscribe(q *queue) {
	subs, entries := l.addEntries(q)
	// Each server's SUBSCRIBE is asked for by a goroutine of its own: a
	// server that takes a connection and never answers (a partitioned
	// Redlock node) holds its subscription's owner for up to the health
	// interval, and must hold up neither the other servers' nor this
	// wait. On error, the re-check covers it.
	for _, s := range subs {
		l.goTracked(func() {
			ctx, cancel := context.WithTimeout(l.ctx, l.health())
			defer cancel()
			s.sync(ctx, q.k.Channel)
		})
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.RecheckInterval)
	defer cancel()
	for _, e := range entries {
		select {
		case <-e.ready:
		case <-ctx.Done():
			return
		}
	}
}

// unsubscribe removes the entries mine of q's channel, those one driver
// added; the last channel closes a subscription.
func (l *Locker) unsubscribe(q *queue, mine []*subEntry) {
	keep, stop := l.removeEntries(q, mine)
	for _, s := range stop {
		s.close()
	}
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	defer cancel()
	for _, s := range keep {
		s.sync(ctx, q.k.Channel)
	}
}

// sync asks the owner to send SUBSCRIBE or UNSUBSCRIBE for ch, whichever
// the channel map wants when it is sent, and waits until it is sent, ctx
// ends or the subscription closes.
func (s *subscriber) sync(ctx context.Context, ch string) {
	r := syncReq{ctx: ctx, ch: ch, done: make(chan struct{})}
	select {
	case s.syncs <- r:
	case <-ctx.Done():
		return
	case <-s.closing:
		return
	}
	select {
	case <-r.done:
	case <-ctx.Done():
	case <-s.closing:
	}
}

// close ends the connection and waits for its goroutines to end.
func (s *subscriber) close() {
	s.closeOnce.Do(func() { close(s.closing) })
	<-s.done
}

// own is the goroutine that owns s's connection: it serves the drivers'
// requests and the reader's, one at a time, until s is closed.
func (l *Locker) own(s *subscriber) {
	defer l.wg.Done()
	defer close(s.done)
	ps := s.client.Subscribe(l.ctx)
	received := make(chan struct{})
	l.wg.Add(1) // counted while own is: Close cannot be past its Wait
	go l.receive(s, ps, received)
	for {
		select {
		case r := <-s.syncs:
			if l.wants(s, r.ch) {
				_ = ps.Subscribe(r.ctx, r.ch)
			} else {
				_ = ps.Unsubscribe(r.ctx, r.ch)
			}
			close(r.done)
		case reply := <-s.reconnects:
			ctx, cancel := context.WithTimeout(l.ctx, l.health())
			old := ps
			ps = s.client.Subscribe(ctx, l.wanted(s)...)
			cancel()
			_ = old.Close()
			reply <- ps
		case <-s.closing:
			_ = ps.Close()
			<-received
			return
		}
	}
}

// reconnect asks the owner for a new connection subscribed to every
// wanted channel, in place of ps found dead; nil when s is closing.
func (s *subscriber) reconnect() *redis.PubSub {
	reply := make(chan *redis.PubSub, 1)
	select {
	case s.reconnects <- reply:
	case <-s.closing:
		return nil
	}
	select {
	case ps := <-reply:
		return ps
	case <-s.closing:
		return nil
	}
}

// receive reads the subscription until it is closed. go-redis reconnects
// and resubscribes after a connection error it sees; a connection that
// silently died is found by the health check. Messages published meanwhile
// are lost, which the waiters' re-checks make up for.
func (l *Locker) receive(s *subscriber, ps *redis.PubSub, done chan struct{}) {
	defer l.wg.Done()
	defer close(done)
	prefix := l.id + " "
	failures := 0
	pinged := false
	for {
		// Every call on the connection has a deadline, also a new
		// connection's handshake, which a client with
		// ContextTimeoutEnabled would otherwise wait for forever on a
		// server that never answers.
		ctx, cancel := context.WithTimeout(l.ctx, l.health())
		msg, err := ps.ReceiveTimeout(ctx, l.health())
		cancel()
		select {
		case <-s.closing:
			return
		case <-l.ctx.Done():
			return
		default:
		}
		var nerr net.Error
		switch {
		case err != nil && errors.As(err, &nerr) && nerr.Timeout():
			if pinged {
				// Silent for a whole interval after a ping: replace it.
				if ps = s.reconnect(); ps == nil {
					return
				}
				pinged = false
				continue
			}
			ctx, cancel := context.WithTimeout(l.ctx, l.health())
			pinged = ps.Ping(ctx) == nil
			cancel()
			continue
		case err != nil:
			failures++
			t := time.NewTimer(l.backoff(failures))
			select {
			case <-t.C:
			case <-s.closing:
				t.Stop()
				return
			case <-l.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		failures, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				l.confirmed(s, m.Channel)
			}
		case *redis.Message:
			if m.Payload == "wake" {
				// Redlock: a release on this node; the driver tries again.
				l.wokenOn(s, m.Channel)
				continue
			}
			// Every waiting process sees every grant on the channel; only
			// the addressee parses it, and wakes one goroutine.
			if !strings.HasPrefix(m.Payload, prefix) {
				continue
			}
			if _, ticket, token, last, ok := parseGrant(m.Payload); ok {
				l.grantFor(s, m.Channel, ticket, token, last)
			}
		}
	}
}

// parseGrant splits a grant message: "<process id> <ticket> <token> <last>",
// where last is the last token reserved with it (token.lua, reserve). A
// message of three fields, without last, reserves none.
func parseGrant(payload string) (pid, ticket string, token, last int64, ok bool) {
	f := strings.Fields(payload)
	if len(f) == 3 {
		f = append(f, f[2])
	}
	if len(f) != 4 {
		return "", "", 0, 0, false
	}
	token, err1 := strconv.ParseInt(f[2], 10, 64)
	last, err2 := strconv.ParseInt(f[3], 10, 64)
	return f[0], f[1], token, last, err1 == nil && err2 == nil && last >= token
}

func contains(entries []*subEntry, e *subEntry) bool {
	for _, x := range entries {
		if x == e {
			return true
		}
	}
	return false
}
