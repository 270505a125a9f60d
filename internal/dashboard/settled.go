package dashboard

import (
	"maps"
	"sync"
	"time"
)

// settleAfter is how long after a second has ended no replica writes to
// it any more: each writes a second within flushEvery of its end, plus
// its flush's reads and writes (at most ioTimeout), 2.25 s in all; the
// rest is margin for the replicas' clocks, which must agree (one host, or
// NTP). A replica that writes later (a process paused for longer) adds
// counts that a replica which has already kept the second does not show.
const settleAfter = 5 * time.Second

// settled keeps the seconds of the window that no replica writes any
// more, as a poll read them, so that the next poll reads only the seconds
// after them: about settleAfter of them instead of the whole window. A
// poll needs the whole window for the ranking of the products, and one a
// second from each open page would otherwise read Window's hashes.
type settled struct {
	mu sync.Mutex
	// through is the last second kept: every second of the window up to
	// it is in seconds if it has anything in it. 0 before the first poll.
	through int64
	seconds map[int64]map[string]int64
}

func newSettled() *settled { return &settled{seconds: map[int64]map[string]int64{}} }

// get returns the seconds kept from start on, forgetting older ones, and
// the first second that the caller must read.
func (s *settled) get(start int64) (map[int64]map[string]int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.seconds {
		if t < start {
			delete(s.seconds, t)
		}
	}
	return maps.Clone(s.seconds), max(start, s.through+1)
}

// put keeps the seconds up to last of read, which holds every second from
// the one get said to read on that has anything in it. The maps are kept
// as they are: no one may change them afterwards.
func (s *settled) put(read map[int64]map[string]int64, last int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last <= s.through {
		return // another poll kept them first
	}
	for t, fields := range read {
		if t > s.through && t <= last {
			s.seconds[t] = fields
		}
	}
	s.through = last
}
