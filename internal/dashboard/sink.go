package dashboard

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sink keeps the seconds: adds counts to a second's fields, sets others,
// and reads a range of seconds back.
type sink interface {
	write(ctx context.Context, sec int64, incr, set map[string]int64) error
	// read returns the fields of every second in [from, to] that has any.
	read(ctx context.Context, from, to int64) (map[int64]map[string]int64, error)
}

// KeyPrefix starts the key of each second's hash in Redis:
// seckill:dashboard:<Unix second>.
const KeyPrefix = "seckill:dashboard:"

func secondKey(sec int64) string { return KeyPrefix + strconv.FormatInt(sec, 10) }

// redisSink keeps the seconds in the shared Redis, one hash per second, so
// that every replica adds to the same counts.
type redisSink struct{ rdb redis.UniversalClient }

func (s *redisSink) write(ctx context.Context, sec int64, incr, set map[string]int64) error {
	key := secondKey(sec)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for f, n := range incr {
			p.HIncrBy(ctx, key, f, n)
		}
		if len(set) > 0 {
			args := make([]any, 0, 2*len(set))
			for f, v := range set {
				args = append(args, f, v)
			}
			p.HSet(ctx, key, args...)
		}
		p.Expire(ctx, key, KeyTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("second %d: %w", sec, err)
	}
	return nil
}

func (s *redisSink) read(ctx context.Context, from, to int64) (map[int64]map[string]int64, error) {
	if to < from {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, 0, to-from+1)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sec := from; sec <= to; sec++ {
			cmds = append(cmds, p.HGetAll(ctx, secondKey(sec)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: read the timeline: %w", err)
	}
	out := map[int64]map[string]int64{}
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		fields := make(map[string]int64, len(c.Val()))
		for f, v := range c.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("dashboard: second %d, field %s: %q is not a number", from+int64(i), f, v)
			}
			fields[f] = n
		}
		out[from+int64(i)] = fields
	}
	return out, nil
}

// memorySink keeps one replica's seconds in its memory, for the lock modes
// that have no Redis. It forgets seconds older than Window.
type memorySink struct {
	mu      sync.Mutex
	seconds map[int64]map[string]int64
}

func newMemorySink() *memorySink { return &memorySink{seconds: map[int64]map[string]int64{}} }

func (s *memorySink) write(_ context.Context, sec int64, incr, set map[string]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fields := s.seconds[sec]
	if fields == nil {
		fields = map[string]int64{}
		s.seconds[sec] = fields
	}
	for f, n := range incr {
		fields[f] += n
	}
	for f, v := range set {
		fields[f] = v
	}
	oldest := sec - int64(KeyTTL.Seconds())
	for t := range s.seconds {
		if t < oldest {
			delete(s.seconds, t)
		}
	}
	return nil
}

func (s *memorySink) read(_ context.Context, from, to int64) (map[int64]map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int64]map[string]int64{}
	for t, fields := range s.seconds {
		if t >= from && t <= to {
			c := make(map[string]int64, len(fields))
			for f, v := range fields {
				c[f] = v
			}
			out[t] = c
		}
	}
	return out, nil
}
