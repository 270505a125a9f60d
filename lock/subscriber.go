package lock

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber is the process's one Pub/Sub connection to a Redis deployment
// (one per node in Redlock mode). It listens on the channels of the locks
// that goroutines of this process wait for, and ends when nobody waits. Redisson also shares one subscription per lock and
// process; a subscription per waiting goroutine would cost a connection
// each.
type subscriber struct {
	client   redis.UniversalClient
	channels map[string]*subChannel // wanted channels; guarded by Locker.mu
	done     chan struct{}          // closed when the receive loop has ended

	// opMu serialises SUBSCRIBE, UNSUBSCRIBE and reconnections. Each sends
	// what the channel map says at that moment, so whatever the order in
	// which goroutines race, the last command sent matches the wanted state.
	opMu sync.Mutex
	ps   *redis.PubSub // replaced on reconnection; guarded by opMu

	closeOnce sync.Once
	closing   chan struct{}
}

type subChannel struct {
	q         *queue
	ready     chan struct{} // closed when the server confirms the subscription
	confirmed bool
}

// subscribe adds q's channel to the subscriptions (one per Redis
// deployment; several in Redlock mode), starting them if needed, and waits
// (at most one re-check interval) for the servers' confirmations: a
// message published before that would be missed and only made up for by
// the re-check.
func (l *Locker) subscribe(q *queue) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	var subs []*subscriber
	var ready []chan struct{}
	for i, c := range l.backend.subscribers() {
		s := l.subs[i]
		if s == nil {
			s = &subscriber{
				client:   c,
				ps:       c.Subscribe(l.ctx),
				channels: make(map[string]*subChannel),
				done:     make(chan struct{}),
				closing:  make(chan struct{}),
			}
			l.subs[i] = s
			l.wg.Add(1)
			go l.receive(s)
		}
		sc := &subChannel{q: q, ready: make(chan struct{})}
		s.channels[q.k.channel] = sc
		q.subChans = append(q.subChans, sc)
		subs = append(subs, s)
		ready = append(ready, sc.ready)
	}
	l.mu.Unlock()

	// Each server's SUBSCRIBE is sent by a goroutine of its own: a server
	// that takes a connection and never answers (a partitioned Redlock
	// node) holds its subscription's connection for up to the health
	// interval,
	// and must hold up neither the other servers' nor this wait. On error,
	// the re-check covers it.
	for _, s := range subs {
		l.goTracked(func() {
			ctx, cancel := context.WithTimeout(l.ctx, hooks.health())
			defer cancel()
			_ = l.syncChannel(ctx, s, q.k.channel)
		})
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RecheckInterval)
	defer cancel()
	for _, r := range ready {
		select {
		case <-r:
		case <-ctx.Done():
			return
		}
	}
}

// unsubscribe removes the entries mine of q's channel, those one driver
// added; the last channel closes a subscription.
func (l *Locker) unsubscribe(q *queue, mine []*subChannel) {
	l.mu.Lock()
	var keep, stop []*subscriber
	for i, s := range l.subs {
		if s == nil {
			continue
		}
		sc := s.channels[q.k.channel]
		if sc != nil && (slices.Contains(mine, sc) || (hooks.unsubscribeByQueue && sc.q == q)) {
			delete(s.channels, q.k.channel)
		}
		if len(s.channels) == 0 {
			l.subs[i] = nil
			stop = append(stop, s)
		} else {
			keep = append(keep, s)
		}
	}
	l.mu.Unlock()
	for _, s := range stop {
		s.close()
	}
	ctx, cancel := context.WithTimeout(l.ctx, releaseTimeout)
	defer cancel()
	for _, s := range keep {
		_ = l.syncChannel(ctx, s, q.k.channel)
	}
}

// syncChannel sends SUBSCRIBE or UNSUBSCRIBE for ch, whichever the channel
// map wants now.
func (l *Locker) syncChannel(ctx context.Context, s *subscriber, ch string) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	l.mu.Lock()
	_, want := s.channels[ch]
	l.mu.Unlock()
	if want {
		return s.ps.Subscribe(ctx, ch)
	}
	return s.ps.Unsubscribe(ctx, ch)
}

// reconnect replaces a connection found dead with a new one subscribed to
// every wanted channel.
func (l *Locker) reconnect(s *subscriber) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	select {
	case <-s.closing:
		return
	default:
	}
	l.mu.Lock()
	chans := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		chans = append(chans, ch)
	}
	l.mu.Unlock()
	old := s.ps
	ctx, cancel := context.WithTimeout(l.ctx, hooks.health())
	defer cancel()
	s.ps = s.client.Subscribe(ctx, chans...)
	_ = old.Close()
}

// close ends the connection and waits for the receive loop to end.
func (s *subscriber) close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.opMu.Lock()
		_ = s.ps.Close()
		s.opMu.Unlock()
	})
	<-s.done
}

// receive reads the subscription until it is closed. go-redis reconnects
// and resubscribes after a connection error it sees; a connection that
// silently died is found by the health check. Messages published meanwhile
// are lost, which the waiters' re-checks make up for.
func (l *Locker) receive(s *subscriber) {
	defer l.wg.Done()
	defer close(s.done)
	prefix := l.id + " "
	failures := 0
	pinged := false
	for {
		s.opMu.Lock()
		ps := s.ps
		s.opMu.Unlock()
		// Every call on the connection has a deadline, also a new
		// connection's handshake, which a client with
		// ContextTimeoutEnabled would otherwise wait for forever on a
		// server that never answers, holding the subscription's mutex.
		ctx, cancel := context.WithTimeout(l.ctx, hooks.health())
		msg, err := ps.ReceiveTimeout(ctx, hooks.health())
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
				l.reconnect(s) // silent for a whole interval after a ping
				pinged = false
				continue
			}
			ctx, cancel := context.WithTimeout(l.ctx, hooks.health())
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
			if m.Kind != "subscribe" {
				continue
			}
			l.mu.Lock()
			if sc := s.channels[m.Channel]; sc != nil && !sc.confirmed {
				sc.confirmed = true
				close(sc.ready)
			}
			l.mu.Unlock()
		case *redis.Message:
			if m.Payload == "wake" {
				// Redlock: a release on this node; the driver tries again.
				l.mu.Lock()
				if sc := s.channels[m.Channel]; sc != nil {
					sc.q.woken()
					sc.q.wake()
				}
				l.mu.Unlock()
				continue
			}
			// Every waiting process sees every grant on the channel; only
			// the addressee parses it, and wakes one goroutine.
			if !strings.HasPrefix(m.Payload, prefix) {
				continue
			}
			_, ticket, token, last, ok := parseGrant(m.Payload)
			if !ok {
				continue
			}
			l.mu.Lock()
			if sc := s.channels[m.Channel]; sc != nil && !l.closed {
				sc.q.grantArrived(ticket, token, last)
				l.tend(sc.q)
			}
			l.mu.Unlock()
		}
	}
}
