package lock

import (
	"container/heap"
	"sync"
	"time"
)

// watchdog keeps every held Lock's next event (its renewal, or its
// deadline) in one heap behind one timer. A timer per Lock would cost a
// runtime timer insertion on every acquisition, and inserting a timer that
// fires before all others wakes Go's network poller with a syscall, both
// on the path of every uncontended acquire and release. This timer is
// armed for the earliest event and
// touched only when an earlier one arrives; a Lock released or rescheduled
// meanwhile just leaves the heap, and an early wake-up re-arms it.
type watchdog struct {
	locker *Locker

	mu    sync.Mutex
	locks leaseHeap
	timer *time.Timer
	armed time.Time // when the timer fires; zero when it is not armed
}

// schedule makes at the time lk is next looked at. Callers may hold lk.mu
// (the lock order is on Locker).
func (w *watchdog) schedule(lk *Lock, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lk.at = at
	if lk.index >= 0 {
		heap.Fix(&w.locks, lk.index)
	} else {
		heap.Push(&w.locks, lk)
	}
	if w.armed.IsZero() || at.Before(w.armed) {
		w.arm(at)
	}
}

// remove takes lk out of the heap; the timer stays as it is.
func (w *watchdog) remove(lk *Lock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lk.index >= 0 {
		heap.Remove(&w.locks, lk.index)
	}
}

func (w *watchdog) arm(at time.Time) {
	w.armed = at
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(at), w.fire)
		return
	}
	w.timer.Reset(time.Until(at))
}

// fire hands the Locks whose time has come to Lock.due, and re-arms for
// the next one.
func (w *watchdog) fire() {
	l := w.locker
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	defer l.wg.Done()

	w.mu.Lock()
	w.armed = time.Time{}
	now := time.Now()
	var due []*Lock
	for len(w.locks) > 0 && !w.locks[0].at.After(now) {
		due = append(due, heap.Pop(&w.locks).(*Lock))
	}
	if len(w.locks) > 0 {
		w.arm(w.locks[0].at)
	}
	w.mu.Unlock()
	for _, lk := range due {
		lk.due()
	}
}

// stop disarms the timer for good (Close).
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.armed = time.Time{}
	w.locks = nil
}

// leaseHeap orders Locks by their next event; Lock.index is its place.
type leaseHeap []*Lock

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	lk := x.(*Lock)
	lk.index = len(*h)
	*h = append(*h, lk)
}
func (h *leaseHeap) Pop() any {
	old := *h
	lk := old[len(old)-1]
	old[len(old)-1] = nil
	lk.index = -1
	*h = old[:len(old)-1]
	return lk
}
