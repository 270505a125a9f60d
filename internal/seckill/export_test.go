package seckill

// Waiting reports how many purchases of the product wait for their batch
// in s, so that tests can form a batch on purpose.
func (s *Service) Waiting(productID int64) int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if q := s.batch.queues[productID]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// ReadsWaiting reports how many buyers of the product wait for a shared
// read in s (the leader of a read in flight is not waiting).
func (s *Service) ReadsWaiting(productID int64) int {
	s.reads.mu.Lock()
	defer s.reads.mu.Unlock()
	if q := s.reads.queues[productID]; q != nil {
		return len(q.waiting)
	}
	return 0
}
