package seckill

// Waiting reports how many purchases of the product wait for their batch
// in s, so that tests can form a batch on purpose.
func (s *Service) Waiting(productID int64) int { return s.batch.waiting(productID) }

// ReadsWaiting reports how many buyers of the product wait for a shared
// read in s (the leader of a read in flight is not waiting).
func (s *Service) ReadsWaiting(productID int64) int {
	s.reads.mu.Lock()
	defer s.reads.mu.Unlock()
	n := 0
	if q := s.reads.queues[readsKey]; q != nil {
		for _, c := range q.waiting {
			if c.productID == productID {
				n++
			}
		}
	}
	return n
}

// RoundsWaiting reports how many products wait for a round of the commit
// line in s (the leader of a round in flight is not waiting).
func (s *Service) RoundsWaiting() int { return s.commits.waiting(commitsKey) }

// CommitRounds is how many rounds of one process may be at work at once.
const CommitRounds = commitRounds
