package lease

import (
	"container/heap"
)

// leaseHeap orders leases by their next event; Lease.index is each one's
// place. Its owner holds the Keeper's mutex.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}

func (h *leaseHeap) push(l *Lease) { heap.Push(h, l) }
func (h *leaseHeap) pop() *Lease   { return heap.Pop(h).(*Lease) }
func (h *leaseHeap) fix(i int)     { heap.Fix(h, i) }
func (h *leaseHeap) remove(i int)  { heap.Remove(h, i) }
