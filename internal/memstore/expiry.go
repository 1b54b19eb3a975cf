package memstore

import "container/heap"

// expiry is one entry of an expiryHeap: a value v due at unix ms at.
type expiry[T any] struct {
	at int64 // unix ms
	v  T
}

// expiryHeap is a min-heap of values by expiry time (unix ms), earliest first, on
// container/heap. Entries are deleted lazily: a line keeps one per admitted session (the ticket
// number), an inventory one per hold (the hold id), and whoever pops an entry checks it against
// the live state, which may have been extended or ended since it was pushed. Ties pop in no
// particular order.
type expiryHeap[T any] []expiry[T]

// push adds v due at atMS.
func (h *expiryHeap[T]) push(atMS int64, v T) { heap.Push(h, expiry[T]{atMS, v}) }

// popDue removes and returns the earliest entry due at or before nowMS; ok is false when the
// heap is empty or its earliest entry is later.
func (h *expiryHeap[T]) popDue(nowMS int64) (e expiry[T], ok bool) {
	if len(*h) == 0 || (*h)[0].at > nowMS {
		return e, false
	}
	return heap.Pop(h).(expiry[T]), true
}

// heap.Interface; callers use push and popDue (or heap.Init after appending in bulk).
func (h expiryHeap[T]) Len() int           { return len(h) }
func (h expiryHeap[T]) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap[T]) Push(x any)        { *h = append(*h, x.(expiry[T])) }
func (h *expiryHeap[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
