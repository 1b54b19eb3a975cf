package memstore

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExpiryHeapPopsDueEntriesEarliestFirst(t *testing.T) {
	var h expiryHeap[string]
	_, ok := h.popDue(1 << 62)
	require.False(t, ok, "empty heap")

	h.push(30, "c")
	h.push(10, "a")
	h.push(20, "b")
	h.push(40, "d")

	_, ok = h.popDue(9)
	require.False(t, ok, "nothing due before 10")
	var got []string
	for e, ok := h.popDue(30); ok; e, ok = h.popDue(30) {
		got = append(got, e.v)
	}
	require.Equal(t, []string{"a", "b", "c"}, got, "due at or before 30, earliest first")
	require.Equal(t, 1, h.Len())
	e, ok := h.popDue(40)
	require.True(t, ok)
	require.Equal(t, expiry[string]{40, "d"}, e)
}

func TestExpiryHeapOrdersManyEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h expiryHeap[int64]
	var want []int64
	for i := range 500 {
		at := r.Int64N(1000)
		want = append(want, at)
		if i%2 == 0 {
			h.push(at, int64(i))
		} else { // bulk load, as a snapshot restore does
			h = append(h, expiry[int64]{at, int64(i)})
			heap.Init(&h)
		}
	}
	slices.Sort(want)
	var got []int64
	for e, ok := h.popDue(1000); ok; e, ok = h.popDue(1000) {
		got = append(got, e.at)
	}
	require.Equal(t, want, got)
}
